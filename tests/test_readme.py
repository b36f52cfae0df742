"""The README opens with the two commands a new user needs, and its test command is what CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_starts_with_the_app_and_the_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    top = readme[:readme.index("\n## ")]  # before the first section
    assert "bash scripts/install.sh && .venv/bin/python app.py" in top
    assert "bash scripts/test.sh" in top
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in ("docs/images/page-run.png", "docs/OPTIONS.md", "docs/FORMATS.md", "docs/RELIABILITY.md",
                   "docs/PERFORMANCE.md", "notebooks/colab.ipynb"):
        assert target in readme and (ROOT / target).exists(), target


def test_pip_install_of_the_package_gets_what_requirements_txt_installs():
    """`pip install .` lacked PyAV (every clip unreadable), pillow-heif and two optimizers' packages."""
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    required = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert sorted(declared) == sorted(required)
