"""Anima end to end on the tiny model: a LoRA trained by `python -m ot_gradio train` from our
preset (FLOAT_8 transformer and Qwen3, attn1/attn2/ff layers) saved as DIFFUSERS_LORA, loaded by diffusers'
own modular Anima pipeline (AnimaAutoBlocks from the folder's modular_model_index.json) with
`load_lora_weights`, nothing ignored, and its image changes; and the flow-matching loss through
Anima's predict falls with fixed noise and timesteps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import falls, imported, lora_load_problems, losses_with_fixed_noise, one_image, tiny_fixture, train_from_cli

pytestmark = pytest.mark.slow
PROMPT = "a red circle"

tiny_anima = tiny_fixture("anima", "tiny_anima")


def anima_pipeline(folder):
    """diffusers' AnimaModularPipeline of the folder, every component loaded from it."""
    from diffusers import ModularPipeline

    from ot_gradio.models.anima import torchvision_free_cosmos

    torchvision_free_cosmos()  # diffusers' Cosmos transformer needs torchvision's resize, absent here
    pipe = ModularPipeline.from_pretrained(str(folder), local_files_only=True)
    pipe.load_components(torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def anima_image(pipe) -> np.ndarray:
    with torch.no_grad():
        images = pipe(prompt=PROMPT, height=64, width=64, num_inference_steps=2, generator=torch.Generator().manual_seed(0),
                      output_type="np", output="images")
    return np.asarray(images[0])


def test_lora_from_our_preset_trains_from_the_cli_and_loads_in_the_anima_pipeline(tiny_anima, shapes, tmp_path):
    config = imported(PRESETS_DIR / "anima-lora.json", tiny_anima.diffusers_dir, shapes, tmp_path, "lora.safetensors",
                      resolution="64", epochs=2, learning_rate=1e-2)
    assert config["output_model_format"] == "KOHYA_LORA"  # as OneTrainer's preset (ComfyUI's layout); diffusers' pipeline reads:
    config["output_model_format"] = "DIFFUSERS_LORA"
    train_from_cli(config, tmp_path)
    path = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
        assert any(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)
    layers = {k.split(".lora_")[0] for k in keys}
    assert layers and all(k.startswith("transformer.transformer_blocks.") for k in layers)
    assert {k.split(".")[3] for k in layers} == {"attn1", "attn2", "ff"}

    pipe = anima_pipeline(tiny_anima.diffusers_dir)
    before = anima_image(pipe)
    assert np.array_equal(anima_image(anima_pipeline(tiny_anima.diffusers_dir)), before)  # the same image twice
    assert lora_load_problems(pipe, path) == []
    assert np.abs(anima_image(pipe) - before).max() > 1e-5


def test_lora_loss_falls_with_fixed_noise_and_timesteps(tiny_anima, shapes, tmp_path):
    """The flow-matching objective through Anima's predict learns: one image, fixed noise and t."""
    config = imported(PRESETS_DIR / "anima-lora.json", tiny_anima.diffusers_dir, one_image(shapes, tmp_path), tmp_path,
                      "lora.safetensors", resolution="64", epochs=25, batch_size=1, learning_rate=8e-2, lora_alpha=16.0,
                      layer_filter_preset="full", train_dtype="FLOAT_32", samples=[],
                      transformer={"train": True, "weight_dtype": "FLOAT_32"})
    losses = losses_with_fixed_noise(config, tmp_path)
    assert len(losses) == 25 and falls(losses, 0.8), " ".join(f"{x:.3f}" for x in losses)
