"""Pieces of the Training and Model tabs that are more than plain fields: the optimizer's own
settings (only the chosen optimizer's, remembered per optimizer), the learning-rate plot, and
the memory the chosen weight dtypes need."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from ..config.enums import LearningRateScheduler
from ..training.schedulers import lr_curve  # pure Python: no torch

# Parameters per model part, per family (the reference pages show such a table by hand).
# Counted with diffusers 0.42 / transformers 5.23 on the meta device from the published
# configs: each model repo's config.json, or the config diffusers' conversion script builds the
# model with (scripts/convert_wuerstchen.py, convert_stable_cascade.py,
# convert_pixart_alpha_to_diffusers.py). Known totals check them: SD 1.5 UNet 859.5 M, SDXL
# UNet 2.57 B, Stable Cascade stage C 3.6 B, T5-XXL encoder 4.76 B.
_VAE = 83_653_863  # AutoencoderKL of SD 1.x/2.x/SDXL/PixArt-α (sd-vae-ft-ema): same layout
_CLIP_L = 123_060_480  # openai/clip-vit-large-patch14 text model (SD 1.5, SDXL's first encoder)
_SD15 = {"unet": 859_520_964, "text_encoder": _CLIP_L, "vae": _VAE}
# SD 2.x: UNet with 1024-wide cross-attention and linear projections; OpenCLIP ViT-H text model
# with 23 of its 24 layers (stabilityai/stable-diffusion-2-1 text_encoder/config.json).
_SD2 = {"unet": 865_910_724, "text_encoder": 340_387_840, "vae": _VAE}
# SDXL base 1.0: unet/config.json (transformer depth 1/2/10, text_time embedding); second text
# encoder OpenCLIP ViT-bigG with its 1280x1280 projection.
_SDXL = {"unet": 2_567_463_684, "text_encoder": _CLIP_L, "text_encoder_2": 694_659_840, "vae": _VAE}
# Inpainting UNets read 9 input channels (latent, mask, masked image): 5 more in conv_in.
_INPAINT_EXTRA = 320 * 5 * 3 * 3
# EfficientNetV2-S features (torchvision: 21,458,488 parameters with the 1280x1000 classifier,
# which the encoder drops) plus the 1x1 conv to 16 latent channels and its batch norm (affine
# in Würstchen 2, not in Stable Cascade).
_EFFNET = 21_458_488 - 1_281_000 + 1280 * 16
_PAELLA_VQ = 18_406_894  # PaellaVQModel of warp-ai/wuerstchen (stage A of both)
PARAMS: dict[str, dict[str, int]] = {
    "STABLE_DIFFUSION_15": _SD15,
    "STABLE_DIFFUSION_15_INPAINTING": {**_SD15, "unet": _SD15["unet"] + _INPAINT_EXTRA},
    "STABLE_DIFFUSION_20": _SD2,
    "STABLE_DIFFUSION_20_BASE": _SD2,
    "STABLE_DIFFUSION_21": _SD2,
    "STABLE_DIFFUSION_21_BASE": _SD2,
    "STABLE_DIFFUSION_20_INPAINTING": {**_SD2, "unet": _SD2["unet"] + _INPAINT_EXTRA},
    "STABLE_DIFFUSION_XL_10_BASE": _SDXL,
    "STABLE_DIFFUSION_XL_10_BASE_INPAINTING": {**_SDXL, "unet": _SDXL["unet"] + _INPAINT_EXTRA},
    # Würstchen 2: WuerstchenPrior(c=1536, depth=32, nhead=24) with the OpenCLIP bigG text model
    # (no projection); decoder WuerstchenDiffNeXt() defaults with the OpenCLIP ViT-H text model.
    "WUERSTCHEN_2": {"prior": 993_636_896, "text_encoder": 693_021_440, "decoder": 1_055_365_280,
                     "decoder_text_encoder": 352_984_064, "decoder_vqgan": _PAELLA_VQ, "effnet_encoder": _EFFNET + 32},
    # Stable Cascade: the big stage C (StableCascadeUNet, 2048 wide, 8+24 blocks) and the big
    # stage B (320..1280, 2/6/28/6 blocks); bigG text model with projection.
    "STABLE_CASCADE_1": {"prior": 3_589_103_632, "text_encoder": 694_659_840, "decoder": 1_562_941_136,
                         "decoder_vqgan": _PAELLA_VQ, "effnet_encoder": _EFFNET},
    # PixArt-α XL/2 1024: 28 blocks of width 1152 with the resolution/aspect embedders; T5 v1.1
    # XXL encoder; the SD VAE.
    "PIXART_ALPHA": {"transformer": 611_349_152, "text_encoder": 4_762_310_656, "vae": _VAE},
}
BYTES = {"FLOAT_32": 4, "TFLOAT_32": 4, "FLOAT_16": 2, "BFLOAT_16": 2, "FLOAT_8": 1, "INT_8": 1, "NFLOAT_4": 0.5}


def memory_markdown(config: dict[str, Any]) -> str:
    counts = PARAMS.get(str(config.get("model_type", "")))
    if counts is None:
        return f"No parameter counts for {config.get('model_type')} yet."
    rows = ["| part | parameters | weight dtype | memory |", "|---|---|---|---|"]
    total = 0.0
    for part, n in counts.items():
        dtype = (config.get(part) or {}).get("weight_dtype", "FLOAT_32")
        gb = n * BYTES.get(dtype, 4) / 1024**3
        total += gb
        rows.append(f"| {part} | {n / 1e6:,.0f} M | {dtype} | {gb:.2f} GB |")
    rows.append(f"| **total** | | | **{total:.2f} GB** |")
    return "Weights alone (activations, optimizer state and LoRA come on top):\n\n" + "\n".join(rows)


def _count_images(folder: str, subfolders: bool) -> int:
    from ..data.images import is_image_name, is_mask_name  # noqa: PLC0415

    path = Path(folder)
    if not path.is_dir():
        return 0
    walker = os.walk(path) if subfolders else [(str(path), [], os.listdir(path))]
    return sum(1 for _, _, files in walker for f in files if is_image_name(f) and not is_mask_name(f))


def steps_per_epoch(config: dict[str, Any]) -> int:
    """An estimate from the image counts; the trainer's exact number also drops incomplete buckets."""
    images = 0.0
    for c in config.get("concepts", []):
        if not c.get("enabled", True):
            continue
        n = _count_images(c.get("path", ""), c.get("include_subdirectories", False))
        if c.get("balancing_strategy") == "SAMPLES":
            images += c.get("balancing", 1.0)
        else:
            images += n * c.get("balancing", 1.0)
    batches = math.ceil(images / max(1, int(config.get("batch_size") or 1)))
    return max(1, math.ceil(batches / max(1, int(config.get("gradient_accumulation_steps") or 1))))


def lr_frame(config: dict[str, Any]):
    import pandas as pd  # noqa: PLC0415

    try:
        per_epoch = steps_per_epoch(config)
        epochs = int(config.get("epochs") or 1)
        total = min(per_epoch * epochs, 20000)
        scheduler = LearningRateScheduler(config.get("learning_rate_scheduler", "CONSTANT"))
        curve = lr_curve(
            scheduler,
            total,
            float(config.get("learning_rate_warmup_steps") or 0),
            float(config.get("learning_rate_cycles") or 1),
            float(config.get("learning_rate_min_factor") or 0),
            float(config.get("learning_rate") or 0),
        )
    except (ValueError, TypeError):
        return pd.DataFrame({"step": [], "lr": []})
    stride = max(1, len(curve) // 500)
    return pd.DataFrame({"step": list(range(0, len(curve), stride)), "lr": curve[::stride]})
