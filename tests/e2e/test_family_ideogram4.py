"""Ideogram 4 end to end on the tiny model: a LoRA from our preset trained by
`python -m ot_gradio train` (CPU-sized: 64 px, 2 epochs, FLOAT_8 transformer and Qwen3-VL kept) with a sample each epoch,
its keys on the trained transformer's attention and feed-forward only (the unconditional
transformer is never trained), and Ideogram4Pipeline loading it with `load_lora_weights` with
nothing ignored, which changes its image."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors import safe_open

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, tiny_fixture, train_from_cli
from tests.models.family_checks import pipeline_images

pytestmark = pytest.mark.slow
PROMPT = "a red circle"

tiny_ideogram4 = tiny_fixture("ideogram4", "tiny_ideogram4")

_image = pipeline_images(prompt=PROMPT, guidance_scale=3.0, guidance_schedule=None, max_sequence_length=64)


def test_lora_from_our_preset_trains_from_the_cli_and_changes_the_pipeline(tiny_ideogram4, shapes, tmp_path):
    from diffusers import Ideogram4Pipeline

    config = imported(PRESETS_DIR / "ideogram4-lora.json", tiny_ideogram4.diffusers_dir, shapes, tmp_path, "lora.safetensors",
                      resolution="64", epochs=2, learning_rate=1e-2, sample_after=1, sample_after_unit="EPOCH",
                      samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}])
    assert (config["model_type"], config["output_model_format"], config["transformer"]["weight_dtype"]) == (
        "IDEOGRAM_4", "DIFFUSERS_LORA", "FLOAT_8")
    train_from_cli(config, tmp_path)
    assert len(sorted((tmp_path / "ws").rglob("samples/step*.jpg"))) == 2  # a sample each epoch, drawn with both transformers
    path = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
        assert any(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)
    layers = {k.split(".lora_")[0] for k in keys}
    assert layers and all(k.startswith("transformer.layers.") and (".attention." in k or ".feed_forward." in k) for k in layers)
    pipe = local_pipeline(tiny_ideogram4.diffusers_dir)
    assert isinstance(pipe, Ideogram4Pipeline)
    before = _image(pipe)
    uncond = {k: v.clone() for k, v in pipe.unconditional_transformer.state_dict().items()}
    assert lora_load_problems(pipe, path) == []
    assert np.abs(_image(pipe) - before).max() > 1e-6  # the same pipeline draws the same image bit for bit
    assert all(np.array_equal(v.numpy(), pipe.unconditional_transformer.state_dict()[k].numpy()) for k, v in uncond.items())
