"""ERNIE-Image end to end on the tiny model: a LoRA from our preset (FLOAT_8 transformer and text
encoder kept) trained by `python -m ot_gradio train` from the shapes dataset, that
ErnieImagePipeline reloads with `load_lora_weights` (nothing ignored) and that changes its image."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors import safe_open

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, tiny_fixture, train_from_cli
from tests.models.family_checks import pipeline_images

pytestmark = pytest.mark.slow
PROMPT = "a red circle"

tiny_ernie = tiny_fixture("ernie", "tiny_ernie")
_image = pipeline_images(prompt=PROMPT, guidance_scale=4.0, use_pe=False)


def test_lora_from_our_preset_trains_from_the_cli_and_reloads_in_the_pipeline(tiny_ernie, shapes, tmp_path):
    config = imported(PRESETS_DIR / "ernie-lora.json", tiny_ernie.diffusers_dir, shapes, tmp_path, "lora.safetensors",
                      resolution="64", epochs=2, learning_rate=1e-2, lora_rank=4, lora_alpha=4.0)
    assert (config["model_type"], config["output_model_format"], config["layer_filter_preset"]) == ("ERNIE", "DIFFUSERS_LORA", "attn-mlp")
    assert (config["transformer"]["weight_dtype"], config["text_encoder"]["weight_dtype"]) == ("FLOAT_8", "FLOAT_8")
    train_from_cli(config, tmp_path, "ernie-lora.json")

    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        keys = list(f.keys())
        assert all(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)  # every layer trained
    layers = {k.split(".lora_")[0].split(".", 3)[-1] for k in keys}  # attention and MLP of both layers, nothing else
    assert layers == {"self_attention.to_q", "self_attention.to_k", "self_attention.to_v", "self_attention.to_out.0",
                      "mlp.gate_proj", "mlp.up_proj", "mlp.linear_fc2"}, sorted(layers)
    assert all(k.startswith("transformer.layers.") for k in keys)
    pipe = local_pipeline(tiny_ernie.diffusers_dir)
    before = _image(pipe)
    assert lora_load_problems(pipe, out) == []
    assert np.abs(_image(pipe) - before).max() > 1e-5  # the tiny VAE shrinks latent changes
