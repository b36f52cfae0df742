"""notebooks/colab.ipynb: a valid notebook whose first cell gets the code from a form field or an
uploaded .zip (it cloned a placeholder address and failed at once), and whose last passes the
page's password to the app as one argument (a shell line mangled a password with " $ or `)."""

import ast
import json
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "colab.ipynb"


def notebook() -> dict:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))


def code_cells() -> list[str]:
    return ["".join(c["source"]) for c in notebook()["cells"] if c["cell_type"] == "code"]


def test_the_notebook_is_nbformat_4_and_its_code_is_python():
    nb = notebook()
    assert nb["nbformat"] == 4 and isinstance(nb["metadata"], dict)
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code") and isinstance(cell["metadata"], dict)
        assert isinstance(cell["source"], list) and all(isinstance(line, str) for line in cell["source"])
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    for source in code_cells():  # IPython's ! and % lines aside
        ast.parse("\n".join("pass" if line.lstrip()[:1] in "!%" and line.strip() else line for line in source.splitlines()))


def test_no_placeholder_address_and_the_password_is_no_shell_word():
    text = NOTEBOOK.read_text(encoding="utf-8")
    assert "YOUR-FORK" not in text
    first = code_cells()[0]
    assert 'REPO_URL = ""  #@param {type:"string"}' in first
    last = code_cells()[-1]
    assert not any(line.lstrip().startswith("!") and "password" in line for line in last.splitlines())
    assert '"--auth", f"colab:{password}"' in last  # one argument of the app's argument list


def _first_cell_in(folder: Path) -> str:
    return code_cells()[0].replace('"/content', f'"{folder}')


def test_the_first_cell_says_what_to_do_without_an_address_or_a_zip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError, match="set REPO_URL .* or upload a .zip of the repository"):
        exec(_first_cell_in(tmp_path), {})


def test_the_first_cell_unzips_an_uploaded_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with zipfile.ZipFile(tmp_path / "photos.zip", "w") as z:  # a dataset's zip beside it is not the code
        z.writestr("cat.png", b"")
    with zipfile.ZipFile(tmp_path / "ot_gradio-main.zip", "w") as z:  # GitHub's "Download ZIP": one folder at the top
        z.writestr("ot_gradio-main/app.py", "print('app')\n")
        z.writestr("ot_gradio-main/requirements.txt", "gradio\n")
    scope: dict = {}
    exec(_first_cell_in(tmp_path), scope)
    repo = Path(scope["REPO"])
    assert repo == tmp_path / "ot_gradio_zip" / "ot_gradio-main" and (repo / "app.py").is_file()
    assert Path.cwd() == repo  # the next cells' requirements.txt and app.py are found from here
