"""The page's Start refuses what `validate` and `train` refuse before the first step (the same
runner/startcheck.py), naming the field, and starts nothing; the CLI's `--set` cases too."""

from pathlib import Path

import pytest

from ot_gradio.cli import main as cli_main
from ot_gradio.ui.problems import on_screen

CASES = [  # (field, value, what the refusal says)
    ("base_model_name", "", "base_model_name: empty"),
    ("base_model_name", "models/none.safetensors", "base_model_name: models/none.safetensors does not exist"),
    ("layer_filter_preset", "nope", "layer_filter_preset: 'nope' is not a layer preset"),
    ("output_model_destination", f"out/{'n' * 300}.safetensors", "output_model_destination: the file name"),
    ("cache_dir", "cache\0x", "cache_dir: contains a NUL character"),
]


@pytest.mark.parametrize(("field", "value", "message"), CASES, ids=[c[0] + str(i) for i, c in enumerate(CASES)])
def test_start_refuses_what_train_refuses(page, fake_start, field, value, message):
    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields[field].component] = value
    with pytest.warns(UserWarning, match="nothing was started"):
        problems = page.on_start(values)[page.monitor.problems]
    assert on_screen(message) in problems and not fake_start  # by tab and label (tests/ui/test_problems.py)


def test_start_still_starts_a_good_config(page, fake_start):
    values = page.form_values(page.on_page_load()[page.config_state])
    page.on_start(values)
    assert len(fake_start) == 1


@pytest.mark.parametrize(("field", "value", "message"), [c for c in CASES if "\0" not in c[1]])
def test_cli_set_cases_are_refused_in_one_line_by_validate_and_train(tmp_path, monkeypatch, capsys, field, value, message):
    monkeypatch.chdir(tmp_path)
    for command in ("validate", "train"):
        assert cli_main([command, "--config", "demo", "--set", f"{field}={value}"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
        assert [line for line in err.splitlines() if line.startswith("error:")] == [next(
            line for line in err.splitlines() if message in line)]
    assert not (Path(tmp_path) / "workspace" / "demo" / "runs").exists()
