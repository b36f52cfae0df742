"""Z-Image end to end through the worker on the tiny model: OneTrainer's z-image-LoRA-16GB.json
and z-image-finetune-24GB.json imported unchanged but for the base model, the dataset, the output
and a CPU-sized run (64 px, 2 epochs), the LoRA reloaded into ZImagePipeline with
`load_lora_weights` changing its output, the fine-tune's original-layout transformer file read
back by diffusers' from_single_file; and the flow-matching loss through Z-Image's predict falls
with fixed noise and timesteps."""

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
PRESETS = Path(__file__).resolve().parents[1] / "config" / "data" / "onetrainer-presets-2026"
PROMPT = "a red circle"
# a CPU-sized run; `compile` (on in both OneTrainer presets) is turned off: torch.compile on the
# CPU compiles the transformer again for every caption length (the pipeline's per-prompt lists),
# and a 2-epoch run did not finish in 10 minutes
CPU_SIZE = {"resolution": "64", "epochs": 2, "compile": False}


tiny_z = tiny_fixture("z-image", "tiny_z")


_image = pipeline_images(prompt=PROMPT, guidance_scale=0.0)


def _check_lora(tiny_z, path: Path, min_change: float) -> None:
    """Loads into ZImagePipeline with no warning, changes its image (the same pipeline draws the
    same image twice bit for bit, so any change is the LoRA's); ComfyUI places every key."""
    from diffusers import ZImagePipeline

    from ot_gradio.models.z_image_keys import comfy_lora_targets

    pipe = local_pipeline(tiny_z.diffusers_dir, ZImagePipeline)
    before = _image(pipe)
    assert lora_load_problems(pipe, path) == []
    assert np.array_equal(_image(pipe.__class__.from_pretrained(str(tiny_z.diffusers_dir), local_files_only=True)), before)
    assert np.abs(_image(pipe) - before).max() > min_change
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
        assert any(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)
    assert keys and all(k.startswith("transformer.") for k in keys)
    comfy_lora_targets(pipe.transformer, keys)


def test_onetrainer_z_image_lora_preset_trains_and_reloads_in_the_pipeline(tiny_z, shapes, tmp_path):
    """z-image-LoRA-16GB.json as OneTrainer ships it: transformer and Qwen3 in FLOAT_8 (our own
    float8 layers, which run on the CPU), BFLOAT_16 training, LoRA on the main
    layers' attention and feed-forward by regex, DIFFUSERS_LORA output."""
    config = imported(PRESETS / "z-image-LoRA-16GB.json", tiny_z.diffusers_dir, shapes, tmp_path, "lora.safetensors", **CPU_SIZE)
    assert (config["training_method"], config["transformer"]["weight_dtype"], config["text_encoder"]["weight_dtype"]) == (
        "LORA", "FLOAT_8", "FLOAT_8")
    run_until_done(config, tmp_path)
    path = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(path), "pt") as f:
        layers = {k.split(".lora_")[0] for k in f.keys()}
    assert layers and all(".layers." in k and "refiner" not in k for k in layers)
    _check_lora(tiny_z, path, 1e-6)  # the preset's learning rate (3e-4) for 2 epochs moves the tiny model's image little


def test_lora_from_our_preset_with_a_sample(tiny_z, shapes, tmp_path):
    """Our preset with the transformer from a Q8_0 .gguf file of it (weight_dtype GGUF_A8_INT: read
    as GGUF through diffusers' single-file loader, the matmuls in 8 bits; plain GGUF: the Flux.1
    e2e test; the FLOAT_8 transformer is OneTrainer's preset's above), sampled through it with the
    LoRA; the LoRA loads into the plain pipeline."""
    from safetensors.torch import load_file

    from ot_gradio.models.z_image import ZImage
    from tests.models.gguf_files import write_gguf

    config = imported(PRESETS_DIR / "z-image-lora.json", tiny_z.diffusers_dir, shapes, tmp_path, "lora.safetensors", **CPU_SIZE,
                     learning_rate=1e-2, samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}],
                     sample_after=1, sample_after_unit="EPOCH")
    original = ZImage.load(str(tiny_z.diffusers_dir)).save_single_file(tmp_path / "t.safetensors", None)
    config["transformer"].update(weight_dtype="GGUF_A8_INT", model_name=str(write_gguf(load_file(str(original)), tmp_path / "t.gguf", "z_image")))
    _, events = run_until_done(config, tmp_path)
    assert [e for e in events if e["type"] == "sample"]
    _check_lora(tiny_z, tmp_path / "out" / "lora.safetensors", 1e-5)  # the tiny VAE shrinks latent changes


def test_onetrainer_z_image_finetune_preset_writes_the_original_transformer(tiny_z, shapes, tmp_path):
    """z-image-finetune-24GB.json: FINE_TUNE with Adafactor (fused back pass, stochastic rounding),
    Qwen3 frozen in FLOAT_8, a BFLOAT_16 ORIGINAL_TRANSFORMER file that from_single_file reads."""
    from diffusers import ZImageTransformer2DModel

    config = imported(PRESETS / "z-image-finetune-24GB.json", tiny_z.diffusers_dir, shapes, tmp_path, "model.safetensors", **CPU_SIZE)
    assert (config["training_method"], config["output_model_format"]) == ("FINE_TUNE", "ORIGINAL_TRANSFORMER")
    run_until_done(config, tmp_path)
    out = tmp_path / "out" / "model.safetensors"
    with safe_open(str(out), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"} and "layers.0.attention.qkv.weight" in f.keys()
    tuned = ZImageTransformer2DModel.from_single_file(str(out), config=str(tiny_z.diffusers_dir), subfolder="transformer",
                                                      local_files_only=True, torch_dtype=torch.bfloat16).state_dict()
    base = ZImageTransformer2DModel.from_pretrained(str(tiny_z.diffusers_dir), subfolder="transformer").state_dict()
    assert tuned.keys() == base.keys()
    assert [k for k in tuned if not torch.equal(tuned[k], base[k].to(torch.bfloat16))]


def test_lora_loss_falls_with_fixed_noise_and_timesteps(tiny_z, shapes, tmp_path):
    """The flow-matching objective through Z-Image's predict learns: one image, fixed noise and t."""
    config = imported(PRESETS_DIR / "z-image-lora.json", tiny_z.diffusers_dir, one_image(shapes, tmp_path), tmp_path,
                      "lora.safetensors", resolution="64", epochs=25, batch_size=1, learning_rate=4e-2, lora_alpha=16.0,
                      layer_filter_preset="full", train_dtype="FLOAT_32", samples=[],
                      transformer={"train": True, "weight_dtype": "FLOAT_32"})
    losses = losses_with_fixed_noise(config, tmp_path)
    assert len(losses) == 25 and falls(losses, 0.8), losses

