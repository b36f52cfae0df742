"""The Model tab's "Estimate memory": the memory planner's line for the config on the
form, computed in a child process (`python -m ot_gradio estimate-memory --config -`) so that the
page process never imports torch; a clear message for a bad config, a base model that cannot be
loaded, and a child that does not answer in time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ot_gradio.ui import memory_estimate
from ot_gradio.ui.memory_estimate import estimate_markdown
from ot_gradio.ui.page import Page
from ot_gradio.ui.state import preset_config

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_demo_config_is_estimated_in_a_child_process_without_torch_in_this_one(tmp_path):
    # A fresh interpreter stands for the page process (pytest's may hold torch from other tests):
    # the demo preset (a tiny SD 1.5 built in memory) gets the planner's line, and torch, diffusers
    # and transformers are still not imported afterwards.
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from ot_gradio.ui.memory_estimate import estimate_markdown\n"
        "from ot_gradio.ui.state import preset_config\n"
        "text = estimate_markdown(preset_config('demo', Path(sys.argv[1])))\n"
        "bad = [m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules]\n"
        "print(json.dumps({'text': text, 'heavy': bad}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy"] == []
    text = result["text"]
    assert text.startswith("**Memory estimate:** peak ≈ "), text
    assert " on cpu (" in text and " free), gradient checkpointing " in text, text
    first = text.split("\n")[0]
    assert first.endswith(": fits") or ": does not fit: turn on " in first, text
    # the breakdown the run's log gives: weights per part, optimizer state measured, activations measured
    assert "unet " in text and "ADAMW: 8.0 bytes per weight, measured" in text and "activations " in text, text


def test_a_bad_config_names_the_field_and_starts_no_process(tmp_path, monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("a config with problems must not start the estimate process")

    monkeypatch.setattr(memory_estimate, "run_child", no_process)
    config = preset_config("demo", tmp_path)
    config["batch_size"] = 0
    config["resolution"] = "abc"
    text = estimate_markdown(config)
    assert text.startswith("**Memory not estimated: fix the config first.**"), text
    assert "- `batch_size: must be >= 1 (got 0)`" in text and "- `resolution: 'abc' is not a resolution" in text, text


def test_a_base_model_that_cannot_be_loaded_says_so(tmp_path):
    config = preset_config("demo", tmp_path)
    config["base_model_name"] = str(tmp_path / "no-such-model")
    text = estimate_markdown(config)
    assert text.startswith("**Memory not estimated:** ModelLoadError: Base model "), text
    assert f"Check `base_model_name` ({tmp_path / 'no-such-model'})" in text and "validate --config" in text, text


def test_no_answer_in_time_and_a_crashing_child_are_reported(tmp_path):
    config = preset_config("demo", tmp_path)
    slow = [sys.executable, "-c", "import time; time.sleep(30)"]
    text = estimate_markdown(config, timeout=0.5, command=slow)
    assert text.startswith("**Memory not estimated: no answer within 0 s.**") and "`base_model_name`: tiny:sd15" in text, text
    crash = [sys.executable, "-c", "import sys; sys.exit('boom: out of memory')"]
    text = estimate_markdown(config, command=crash)
    assert "the estimate process failed (exit code 1): `boom: out of memory`" in text, text


@pytest.mark.parametrize("stdin", ["[1, 2]", '{"model_type": "NOPE"}'])
def test_the_command_answers_bad_input_with_json(stdin):
    out = subprocess.run([sys.executable, "-m", "ot_gradio", "estimate-memory", "--config", "-"], input=stdin, cwd=ROOT,
                         env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["estimated"] is False
    assert result["problems"][0].startswith("--config -: stdin must hold a JSON object" if stdin.startswith("[") else "model_type: must be one of")


def test_the_model_tab_has_the_button_and_the_handler_uses_the_form(page, monkeypatch):
    (handler,) = [fn for fn in page.blocks.fns.values() if getattr(fn.fn, "__func__", None) is Page.on_estimate_memory]
    assert [b for b, event in handler.targets] == [page.memory_estimate.button._id]
    assert handler.outputs == [page.memory_estimate.config]
    # the estimate itself (a model load: minutes) follows on its own, outside the edits' turn
    (estimate,) = [fn for fn in page.blocks.fns.values() if fn.outputs == [page.memory_estimate.output]]
    assert estimate.inputs == [page.memory_estimate.config] and estimate.concurrency_id != handler.concurrency_id == "config"
    model_tab = page.tab_handles["model"]
    assert page.memory_estimate.button in _descendants(model_tab) and page.memory_estimate.output in _descendants(model_tab)

    seen = []
    monkeypatch.setattr(memory_estimate, "estimate_markdown", lambda config: seen.append(config) or "estimated")
    config = page.on_page_load()[page.config_state]
    values = page.form_values(config)
    values[page.fields["batch_size"].component] = 3  # edited on the form, not yet in the state
    assert estimate.fn(page.on_estimate_memory(values)) == "estimated"
    assert seen[0]["batch_size"] == 3


def page_module():
    import ot_gradio.ui.page as module

    return module


def _descendants(block):
    out = []
    for child in getattr(block, "children", []):
        out += [child, *_descendants(child)]
    return out


def test_another_model_clears_the_estimate_and_a_mismatched_base_model_is_named(page):
    """The estimate ("... fits") was of the previous family and stayed after a switch; the Model
    tab said nothing of a Flux base model under an SD 1.5 model type."""
    from ot_gradio.ui.memory_estimate import PROMPT

    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields["epochs"].component] = 7  # the same model: the estimate stays
    assert page.memory_estimate.output not in page.on_edit(values)
    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields["model_type"].component] = "STABLE_DIFFUSION_XL_10_BASE"
    out = page.on_edit(values)
    assert out[page.memory_estimate.output] == PROMPT
    assert "looks like Stable Diffusion 1.x/2.x" in out[page.memory]  # tiny:sd15 under SDXL
    assert page.on_preset("demo")[page.memory_estimate.output] == PROMPT
