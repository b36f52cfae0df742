"""SDXL LoRA (UNet and both text encoders) in the real worker on the tiny SDXL, saved as a kohya
file with sd-scripts' SDXL names and reloaded with diffusers' own StableDiffusionXLPipeline; and the
same for the SDXL inpainting model with masked training, reloaded in StableDiffusionXLInpaintPipeline."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open

from tests.e2e.runs import run_until_done

pytestmark = pytest.mark.slow

PROMPT = "a red circle"


@pytest.fixture(scope="module")
def tiny_sdxl(tmp_path_factory):
    from ot_gradio.models.tiny.sdxl import save_tiny_sdxl

    return save_tiny_sdxl(tmp_path_factory.mktemp("tiny-sdxl-e2e"))


def _config(base_model, concept_folder, tmp_path, **overrides):
    config = {
        "model_type": "STABLE_DIFFUSION_XL_10_BASE",
        "training_method": "LORA",
        "base_model_name": str(base_model),
        "train_device": "cpu",
        "train_dtype": "FLOAT_32",
        "workspace_dir": str(tmp_path / "ws"),
        "cache_dir": str(tmp_path / "cache"),
        "output_model_destination": str(tmp_path / "out" / "lora.safetensors"),
        "output_model_format": "KOHYA_LORA",
        "concepts": [{"name": "shapes", "path": str(concept_folder)}],
        "resolution": "64",
        "batch_size": 2,
        "epochs": 1,
        "learning_rate": 1e-2,
        "learning_rate_warmup_steps": 0,
        "lora_rank": 4,
        "lora_alpha": 4,
        "unet": {"train": True, "gradient_checkpointing": False},
        "text_encoder": {"train": True},
        "text_encoder_2": {"train": True, "learning_rate": 5e-3},
        "samples": [{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}],
        "sample_image_format": "PNG",
        "sample_after": 0,
        "sample_after_unit": "NEVER",
        "backup_after": 0,
        "backup_after_unit": "NEVER",
        "tensorboard": False,
    }
    config.update(overrides)
    return config


def _run(config, tmp_path) -> list[dict]:
    return run_until_done(config, tmp_path, timeout=300)[1]


def _pipe_output(pipe):
    from diffusers import DDIMScheduler

    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config, clip_sample=False)  # the sample's DDIM
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(42)
    with torch.no_grad():
        return pipe(PROMPT, num_inference_steps=2, height=64, width=64, guidance_scale=7.0, generator=g, output_type="np").images[0]


def test_lora_run_on_both_text_encoders_reloads_in_diffusers(tiny_sdxl, shapes, tmp_path):
    from diffusers import StableDiffusionXLPipeline

    out = tmp_path / "out" / "lora.safetensors"
    events = _run(_config(tiny_sdxl.diffusers_dir, shapes, tmp_path), tmp_path)
    lrs = [e["lrs"] for e in events if e["type"] == "metrics"]
    assert lrs and lrs[-1]["text_encoder_2"] == pytest.approx(5e-3) and lrs[-1]["text_encoder"] == pytest.approx(1e-2)

    with safe_open(str(out), "pt") as f:
        names = {k.split(".", 1)[0] for k in f.keys()}
        meta = f.metadata()
    assert meta["ss_base_model_version"] == "sdxl_base_v1-0"
    assert any(n.startswith("lora_te1_text_model_encoder_layers_") for n in names)
    assert any(n.startswith("lora_te2_text_model_encoder_layers_") for n in names)
    assert any(n.startswith("lora_unet_input_blocks_") for n in names)
    assert any(n.startswith("lora_unet_output_blocks_") for n in names)
    assert not any(n.startswith("lora_te_") or "down_blocks" in n for n in names)

    pipe = StableDiffusionXLPipeline.from_pretrained(str(tiny_sdxl.diffusers_dir), local_files_only=True)
    before = _pipe_output(pipe)
    pipe.load_lora_weights(str(out))
    after = _pipe_output(pipe)
    assert np.abs(after - before).max() > 1e-2  # the trained LoRA changes the image

    # ... exactly as training changed it: the run's last sample is the same prompt, seed and sampler
    final = [e for e in events if e["type"] == "sample"][-1]
    sample = np.asarray(Image.open(final["path"]).convert("RGB"), dtype=np.float32) / 255
    assert np.abs(sample - after).max() <= 2 / 255
    assert np.abs(sample - before).max() > 1e-2


@pytest.fixture(scope="module")
def masked_shapes(shapes, tmp_path_factory):
    """The demo shapes, every other one with a mask over its left half."""
    folder = tmp_path_factory.mktemp("masked-shapes-xl")
    images = sorted(p for p in shapes.iterdir() if p.suffix == ".png" and not p.stem.endswith("-masklabel"))
    for i, image in enumerate(images):
        shutil.copy(image, folder / image.name)
        shutil.copy(image.with_suffix(".txt"), folder / image.with_suffix(".txt").name)
        if i % 2 == 0:
            with Image.open(image) as img:
                mask = Image.new("L", img.size, 0)
                mask.paste(255, (0, 0, img.size[0] // 2, img.size[1]))
                mask.save(folder / f"{image.stem}-masklabel.png")
    return folder, len(images), (len(images) + 1) // 2


def test_inpainting_lora_run_with_masks_reloads_in_diffusers(masked_shapes, tmp_path_factory, tmp_path):
    from diffusers import StableDiffusionXLInpaintPipeline

    from ot_gradio.models.tiny.sdxl import save_tiny_sdxl_inpainting

    tiny = save_tiny_sdxl_inpainting(tmp_path_factory.mktemp("tiny-sdxl-inpainting-e2e"))
    folder, image_count, mask_count = masked_shapes
    config = _config(
        tiny.diffusers_dir,
        folder,
        tmp_path,
        model_type="STABLE_DIFFUSION_XL_10_BASE_INPAINTING",
        latent_caching=True,
        masked_training=True,
        unmasked_probability=0.0,
    )
    events = _run(config, tmp_path)
    assert [e for e in events if e["type"] == "sample"]  # text-to-image through the inpainting pipeline
    cached = list((tmp_path / "cache" / "latents").rglob("*.safetensors"))
    assert len(cached) == image_count + mask_count  # masked-image latents beside the images' own

    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        names = {k.split(".", 1)[0] for k in f.keys()}
    assert any(n.startswith("lora_te2_") for n in names) and any(n.startswith("lora_unet_input_blocks_") for n in names)

    pipe = StableDiffusionXLInpaintPipeline.from_pretrained(str(tiny.diffusers_dir), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)

    def output():
        g = torch.Generator().manual_seed(0)
        image, mask = Image.new("RGB", (64, 64), (90, 90, 90)), Image.new("L", (64, 64), 0)
        mask.paste(255, (0, 0, 32, 64))
        with torch.no_grad():
            return pipe(PROMPT, image=image, mask_image=mask, num_inference_steps=2, height=64, width=64, generator=g, output_type="np").images[0]

    before = output()
    pipe.load_lora_weights(str(out))
    assert np.abs(output() - before).max() > 1e-3
