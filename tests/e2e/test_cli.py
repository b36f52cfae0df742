"""The headless CLI: `python -m ot_gradio ...`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args, cwd, timeout=600, **env):
    return subprocess.run(
        [sys.executable, "-m", "ot_gradio", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_lists_commands(tmp_path):
    out = _run(["--help"], tmp_path)
    assert out.returncode == 0
    for command in ("train", "validate", "presets", "app"):
        assert command in out.stdout


def test_bad_config_is_one_line_and_nonzero(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"batch_size": 0}')
    out = _run(["train", "--config", str(bad)], tmp_path)
    assert out.returncode != 0
    assert "batch_size" in out.stderr and "Traceback" not in out.stderr


def test_missing_concept_folder_fails_before_training(tmp_path, lora_config):
    import json

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(lora_config(concepts=[{"name": "x", "path": str(tmp_path / "nope")}])))
    out = _run(["train", "--config", str(cfg)], tmp_path)
    assert out.returncode == 1
    assert "nope" in out.stderr


@pytest.mark.slow
def test_demo_preset_trains_offline_with_a_progress_bar(tmp_path):
    out = _run(["train", "--config", "demo"], tmp_path, OT_GRADIO_TINY_DIR=str(tmp_path / "tiny"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "step" in out.stderr and "it/s" in out.stderr or "s/step" in out.stderr
    lora = tmp_path / "workspace" / "demo" / "models" / "demo-lora.safetensors"
    assert lora.exists()
