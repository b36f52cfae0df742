"""Krea 2 end to end on the tiny model: presets/krea2-lora.json (FLOAT_8 transformer and Qwen3-VL,
the attn-mlp layers, DIFFUSERS_LORA) trained by `python -m ot_gradio train` on the CPU (64 px, 2
epochs); Krea2Pipeline.load_lora_weights reads the file with nothing ignored and its image changes."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors import safe_open

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, tiny_fixture, train_from_cli
from tests.models.family_checks import pipeline_images

pytestmark = pytest.mark.slow
PROMPT = "a red circle"

tiny_krea2 = tiny_fixture("krea2", "tiny_krea2")
_image = pipeline_images(prompt=PROMPT, guidance_scale=0.0)


def test_lora_from_our_preset_trained_headless_changes_the_krea2_pipeline(tiny_krea2, shapes, tmp_path):
    config = imported(PRESETS_DIR / "krea2-lora.json", tiny_krea2.diffusers_dir, shapes, tmp_path, "lora.safetensors",
                      resolution="64", epochs=2, learning_rate=1e-2, samples=[])
    assert (config["model_type"], config["output_model_format"], config["transformer"]["weight_dtype"],
            config["text_encoder"]["weight_dtype"], config["layer_filter"]) == ("KREA_2", "DIFFUSERS_LORA", "FLOAT_8", "FLOAT_8", "attn,ff")
    train_from_cli(config, tmp_path)
    path = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
        assert any(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)
    layers = {k.split(".lora_")[0] for k in keys}
    assert layers and all(k.startswith("transformer.") and (".attn." in k or ".ff." in k) for k in layers)
    assert any(k.startswith("transformer.transformer_blocks.") for k in layers)
    assert any(k.startswith("transformer.text_fusion.") for k in layers)  # OneTrainer's "attn,ff" reaches the text fusion too
    pipe = local_pipeline(tiny_krea2.diffusers_dir)
    before = _image(pipe)
    assert lora_load_problems(pipe, path) == []
    assert np.abs(_image(pipe) - before).max() > 1e-6  # the same pipeline draws the same image bit for bit
