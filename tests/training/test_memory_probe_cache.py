"""The memory planner's probe result is reused by a later run with the same model structure and
step settings (training/memory_probe_cache.py; time to the first step), and measured
again when anything the step depends on changes."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.validation import validate
from ot_gradio.training import memory_plan, memory_probe, memory_probe_cache


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    """The tiny SD 1.5 (built in memory) with the LoRA layers a run adds, and its param groups."""
    from ot_gradio.models.registry import get_family
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import configure_model
    from ot_gradio.training.methods import get_method

    cfg = _config(tmp_path_factory.mktemp("setup"))
    device = torch.device("cpu")
    precision = Precision(cfg.train_dtype, device, cfg.enable_autocast_cache)
    model = get_family(cfg.model_type).load(cfg.base_model_name, dtypes={p: torch.float32 for p in ("unet", "text_encoder", "vae")})
    configure_model(model, cfg, device, precision)
    groups = get_method(cfg.training_method).setup(model, cfg, device)
    return model, groups, precision


def _config(tmp_path, **overrides):
    return validate({
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": "tiny:sd15", "resolution": "64",
        "batch_size": 2, "train_device": "cpu", "train_dtype": "FLOAT_32", "text_encoder": {"train": False},
        "concepts": [{"name": "x", "path": str(tmp_path)}], "workspace_dir": str(tmp_path / "ws"),
        "cache_dir": str(tmp_path / "cache"), "output_model_destination": str(tmp_path / "out.safetensors"), **overrides,
    })


@pytest.fixture
def probes(monkeypatch):
    """The real probe, counted."""
    calls = []
    real = memory_probe.measure_step

    def counted(*args, **kwargs):
        calls.append(args[1].batch_size)
        return real(*args, **kwargs)

    monkeypatch.setattr(memory_probe, "measure_step", counted)
    return calls


def plan(lora_model, cfg, measure=(False,)):
    model, groups, precision = lora_model
    return memory_plan.plan_run(model, cfg, torch.device("cpu"), precision, groups, frozenset(), ["unet"], measure=measure)


def test_a_second_run_with_the_same_settings_reuses_the_probe(lora_model, probes, tmp_path):
    first = plan(lora_model, _config(tmp_path))
    assert len(probes) == 1 and not first.probe_reused and "reused" not in first.breakdown(False)
    # settings that do not reach the step (schedule, outputs, seed, optimizer) keep the key
    again = plan(lora_model, _config(tmp_path, epochs=7, learning_rate=0.5, seed=3, optimizer={"optimizer": "SGD"},
                                      output_model_destination=str(tmp_path / "other.safetensors")))
    assert len(probes) == 1, "probed again"
    assert again.probe_reused and again.step_peak == first.step_peak and again.activations(False) > 0
    assert "activations " in again.breakdown(False) and "(probe of an earlier run reused)" in again.breakdown(False)
    assert (tmp_path / "cache" / memory_probe_cache.FILE).is_file()


def test_what_the_step_depends_on_is_measured_again(lora_model, probes, tmp_path):
    base = plan(lora_model, _config(tmp_path))
    bigger = plan(lora_model, _config(tmp_path, batch_size=4))
    larger = plan(lora_model, _config(tmp_path, resolution="128"))
    assert len(probes) == 3 and not bigger.probe_reused and not larger.probe_reused
    assert bigger.step_peak[False] > base.step_peak[False] and larger.step_peak[False] > base.step_peak[False]
    both = plan(lora_model, _config(tmp_path), measure=(False, True))  # checkpointing on: a probe of its own
    assert len(probes) == 4 and both.step_peak[True] < both.step_peak[False]
    plan(lora_model, _config(tmp_path), measure=(False, True))
    assert len(probes) == 4  # both reused now


def test_the_model_structure_is_in_the_key(lora_model, tmp_path):
    model, _, precision = lora_model
    cfg = _config(tmp_path)
    key = memory_probe_cache.probe_key(model, cfg, precision, frozenset(), {})
    assert key == memory_probe_cache.probe_key(model, cfg, precision, frozenset(), {})
    param = next(model.parts["vae"].parameters())
    param.requires_grad_(True)  # a part that trains has other activations and gradients
    try:
        assert memory_probe_cache.probe_key(model, cfg, precision, frozenset(), {}) != key
    finally:
        param.requires_grad_(False)
    assert memory_probe_cache.probe_key(model, cfg, precision, frozenset(), {"unet": True}) != key
    assert memory_probe_cache.probe_key(model, cfg, precision, frozenset({"text_encoder"}), {}) != key


def test_an_unreadable_cache_file_means_a_new_probe(lora_model, probes, tmp_path):
    path = tmp_path / "cache" / memory_probe_cache.FILE
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert not plan(lora_model, _config(tmp_path)).probe_reused and len(probes) == 1
    assert plan(lora_model, _config(tmp_path)).probe_reused and len(probes) == 1  # rewritten
