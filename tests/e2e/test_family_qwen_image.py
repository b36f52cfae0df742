"""Qwen-Image end to end through the worker on the tiny model: OneTrainer's qwen-LoRA-24GB.json
imported unchanged but for the base model, the dataset, the output and a CPU-sized run (64 px,
2 epochs) with its FLOAT_8 transformer (offload fraction 0.1: nothing to move on a CPU) and
FLOAT_8 Qwen2.5-VL; the DIFFUSERS_LORA reloaded with QwenImagePipeline.load_lora_weights changes
its image; our preset's COMFY_LORA (`lora_unet_*`) placed by ComfyUI's rules, with a sample; a
FINE_TUNE transformer file read back by from_single_file; loss falls with fixed noise and t."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import (
    falls,
    imported,
    local_pipeline,
    lora_load_problems,
    losses_with_fixed_noise,
    one_image,
    run_until_done,
    tiny_fixture,
)
from tests.models.family_checks import pipeline_images

pytestmark = pytest.mark.slow
PRESET = Path(__file__).resolve().parents[1] / "config" / "data" / "onetrainer-presets-2026" / "qwen-LoRA-24GB.json"
PRESET_OURS = PRESETS_DIR / "qwen-image-lora.json"
PROMPT = "a red circle"
CPU_SIZE = {"resolution": "64", "epochs": 2}


tiny_qwen = tiny_fixture("qwen-image", "tiny_qwen")


_image = pipeline_images(prompt=PROMPT, true_cfg_scale=1.0)


def test_onetrainer_qwen_preset_trains_a_lora_that_changes_the_pipeline(tiny_qwen, shapes, tmp_path):
    from ot_gradio.models.qwen_image import comfy_lora_targets

    config = imported(PRESET, tiny_qwen.diffusers_dir, shapes, tmp_path, "lora.safetensors", **CPU_SIZE, learning_rate=1e-2)
    assert (config["model_type"], config["transformer"]["weight_dtype"], config["text_encoder"]["weight_dtype"]) == (
        "QWEN", "FLOAT_8", "FLOAT_8")
    assert config["transformer"]["offload_fraction"] == 0.1 and config["layer_filter"] == "attn,img_mlp,txt_mlp"
    _, events = run_until_done(config, tmp_path)
    losses = [e["loss"] for e in events if e["type"] == "metrics" and "loss" in e]
    assert losses and all(np.isfinite(losses))
    path = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
        assert any(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)
    layers = {k.split(".lora_")[0] for k in keys}
    assert layers and all(k.startswith("transformer.transformer_blocks.") for k in layers)
    assert all(".attn." in k or "_mlp." in k for k in layers)  # the preset's filter "attn,img_mlp,txt_mlp"
    pipe = local_pipeline(tiny_qwen.diffusers_dir)
    before = _image(pipe)
    assert lora_load_problems(pipe, path) == []
    assert np.abs(_image(pipe) - before).max() > 1e-6  # the same pipeline draws the same image bit for bit
    assert comfy_lora_targets(pipe.transformer, keys)


def test_comfy_lora_from_our_preset_with_a_sample(tiny_qwen, shapes, tmp_path):
    """presets/qwen-image-lora.json writing COMFY_LORA: `lora_unet_*` keys that ComfyUI's rules
    place and diffusers' own Qwen converter loads; a sample is drawn during the run."""
    from ot_gradio.models.qwen_image import comfy_lora_targets

    config = imported(PRESET_OURS, tiny_qwen.diffusers_dir, shapes, tmp_path, "lora.safetensors", **CPU_SIZE, learning_rate=1e-2,
                     output_model_format="COMFY_LORA", samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}],
                     sample_after=1, sample_after_unit="EPOCH")
    _, events = run_until_done(config, tmp_path)
    assert [e for e in events if e["type"] == "sample"]
    path = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
    assert keys and all(k.startswith("lora_unet_transformer_blocks_") for k in keys)
    pipe = local_pipeline(tiny_qwen.diffusers_dir)
    targets = comfy_lora_targets(pipe.transformer, keys)
    assert "diffusion_model.transformer_blocks.0.img_mlp.net.0.proj.weight" in targets.values()
    before = _image(pipe)
    assert lora_load_problems(pipe, path) == []
    assert np.abs(_image(pipe) - before).max() > 1e-6


def test_finetune_writes_the_transformer_file_that_reloads(tiny_qwen, shapes, tmp_path):
    """ORIGINAL_TRANSFORMER: the transformer alone (diffusers' names, ComfyUI's diffusion model
    loader), read back by the family's loader through diffusers' from_single_file."""
    from diffusers import QwenImageTransformer2DModel

    from ot_gradio.models.qwen_image import QwenImage

    config = imported(PRESET, tiny_qwen.diffusers_dir, shapes, tmp_path, "model.safetensors", **CPU_SIZE, training_method="FINE_TUNE",
                     output_model_format="ORIGINAL_TRANSFORMER", learning_rate=1e-3, output_dtype="FLOAT_32",
                     train_dtype="FLOAT_32", optimizer={"optimizer": "ADAMW"},
                     transformer={"train": True, "weight_dtype": "FLOAT_32"})
    run_until_done(config, tmp_path)
    out = tmp_path / "out" / "model.safetensors"
    with safe_open(str(out), "pt") as f:
        assert "transformer_blocks.0.attn.to_q.weight" in f.keys() and f.metadata()["ot_gradio.model_type"] == "QWEN"
    tuned = QwenImage.load(str(out), config_dir=str(tiny_qwen.diffusers_dir)).transformer.state_dict()
    base = QwenImageTransformer2DModel.from_pretrained(str(tiny_qwen.diffusers_dir), subfolder="transformer").state_dict()
    assert tuned.keys() == base.keys()
    assert [k for k in tuned if not torch.equal(tuned[k], base[k])]


def test_lora_loss_falls_with_fixed_noise_and_timesteps(tiny_qwen, shapes, tmp_path):
    """The flow-matching objective through Qwen-Image's predict learns: one image, fixed noise and t."""
    config = imported(PRESET_OURS, tiny_qwen.diffusers_dir, one_image(shapes, tmp_path), tmp_path, "lora.safetensors",
                      resolution="64", epochs=40, batch_size=1, learning_rate=1e-2, learning_rate_warmup_steps=0, lora_alpha=16.0,
                      layer_filter_preset="full", layer_filter="", train_dtype="FLOAT_32", samples=[],
                      transformer={"train": True, "weight_dtype": "FLOAT_32"})
    losses = losses_with_fixed_noise(config, tmp_path)
    assert len(losses) == 40 and falls(losses, 0.8), losses
