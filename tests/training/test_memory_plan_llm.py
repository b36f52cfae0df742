"""The memory planner measures families whose text encoder is a language model (Qwen3, Mistral3,
Gemma 2): the frozen encoder runs for real before the meta probe (its masks call .item(), which
meta tensors cannot), so gradient checkpointing AUTO decides from a measured peak instead of
falling back to ON."""

from __future__ import annotations

import pytest

from ot_gradio.config.validation import validate
from ot_gradio.training import memory_plan

GB = 1024**3


@pytest.fixture(scope="module")
def z_image_dir(tmp_path_factory):
    from ot_gradio.models.tiny.z_image import save_tiny_z_image

    return str(save_tiny_z_image(tmp_path_factory.mktemp("tiny-z")).diffusers_dir)


def _config(tmp_path, model_type: str, base: str):
    return validate({
        "model_type": model_type, "training_method": "LORA", "base_model_name": base, "resolution": "64", "batch_size": 2,
        "train_device": "cpu", "text_encoder": {"train": False}, "concepts": [{"name": "x", "path": str(tmp_path)}],
        "workspace_dir": str(tmp_path / "ws"), "cache_dir": str(tmp_path / "cache"),
        "output_model_destination": str(tmp_path / "out.safetensors"),
    })


@pytest.mark.parametrize("family", ["Z_IMAGE", "FLUX_2", "SANA"])
def test_language_model_encoders_are_measured(family, tmp_path, monkeypatch, z_image_dir):
    base = {"Z_IMAGE": z_image_dir, "FLUX_2": "tiny:flux2-klein", "SANA": "tiny:sana"}[family]
    config = _config(tmp_path, family, base)
    monkeypatch.setattr(memory_plan, "free_memory", lambda device: 100 * GB)
    roomy = memory_plan.estimate_line(config)
    assert "AUTO -> OFF" in roomy and "not measured" not in roomy and "activations " in roomy, roomy
    monkeypatch.setattr(memory_plan, "free_memory", lambda device: 1024)
    tight = memory_plan.estimate_line(config)
    assert "AUTO -> ON" in tight and "not measured" not in tight, tight
