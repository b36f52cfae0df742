"""Stable Diffusion 2.0 / 2.1 and their 512 px bases (models/sd2.py)."""

from dataclasses import replace

from ..enums import ModelType as M
from . import FamilyInfo
from ._sizes import VAE
from .sd15 import SD_CIRCULAR, SD_COMFY_GAP, SD_LORA, SD_METHODS, SD_PARTS, SD_QUANTIZATION

# SD 2.x: UNet with 1024-wide cross-attention and linear projections; OpenCLIP ViT-H text model
# with 23 of its 24 layers (stabilityai/stable-diffusion-2-1 text_encoder/config.json).
SD2_PARAMS = {"unet": 865_910_724, "text_encoder": 340_387_840, "vae": VAE}

_SD2 = FamilyInfo(SD_PARTS, "unet", ("text_encoder",), implemented=True, methods=SD_METHODS, diffusers_lora=SD_LORA, params=SD2_PARAMS,
                   comfy_gap=SD_COMFY_GAP, safetensors_lora="kohya", circular_padding=SD_CIRCULAR, bucket_quantization=SD_QUANTIZATION)

FAMILIES = {
    M.STABLE_DIFFUSION_20: replace(_SD2, preset="sd20-lora", preset_note="768 px, v-prediction"),
    M.STABLE_DIFFUSION_20_BASE: replace(_SD2, preset="sd20-base-lora", preset_note="512 px"),
    M.STABLE_DIFFUSION_21: replace(_SD2, preset="sd21-lora", preset_note="768 px, v-prediction"),
    M.STABLE_DIFFUSION_21_BASE: replace(_SD2, preset="sd21-base-lora", preset_note="512 px"),
}
