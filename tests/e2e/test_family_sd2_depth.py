"""SD 2.0 depth end to end: our preset trained by `python -m ot_gradio train` on the tiny model
(CPU, 64 px), its depth maps cached beside the latents, and the LoRA reloaded into diffusers'
StableDiffusionDepth2ImgPipeline with `load_lora_weights`, nothing ignored, changing its image."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, tiny_fixture, train_from_cli

pytestmark = pytest.mark.slow

tiny_depth = tiny_fixture("sd2-depth", "tiny_depth")


def _channels(path) -> int:
    with safe_open(str(path), "pt") as f:
        (shape,) = {tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    return shape[0]


def _image(pipe) -> np.ndarray:
    """The depth pipeline's image for a fixed seed, its depth map estimated from a fixed picture."""
    picture = Image.fromarray(np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3))
    return pipe("a red circle", image=picture, strength=1.0, num_inference_steps=2, guidance_scale=7.0,
                generator=torch.Generator().manual_seed(0), output_type="np").images[0]


def test_lora_from_our_preset_trains_from_the_cli_and_reloads_in_the_depth_pipeline(tiny_depth, shapes, tmp_path):
    from diffusers import StableDiffusionDepth2ImgPipeline

    config = imported(PRESETS_DIR / "sd20-depth-lora.json", tiny_depth.diffusers_dir, shapes, tmp_path, "lora.safetensors",
                      resolution="64", epochs=2, learning_rate=1e-2, samples=[])
    assert config["model_type"] == "STABLE_DIFFUSION_20_DEPTH" and config["latent_caching"]
    train_from_cli(config, tmp_path)
    images = len(list(shapes.glob("*.png")))
    cached = list((tmp_path / "cache" / "latents").rglob("*.safetensors"))
    channels = sorted(_channels(p) for p in cached)
    assert images and channels == [1] * (len(cached) // 2) + [4] * (len(cached) // 2)  # a depth map beside each image's latents
    assert len(cached) >= 2 * images

    path = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
    assert keys and all(k.startswith(("lora_unet_", "lora_te_")) for k in keys)
    pipe = local_pipeline(tiny_depth.diffusers_dir, StableDiffusionDepth2ImgPipeline)
    before = _image(pipe)
    assert np.array_equal(_image(pipe), before)
    assert lora_load_problems(pipe, path) == []
    assert np.abs(_image(pipe) - before).max() > 1e-4
