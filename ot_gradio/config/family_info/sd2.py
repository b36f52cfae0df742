"""Stable Diffusion 2.0 / 2.1 and their 512 px bases (models/sd2.py)."""

from dataclasses import replace

from ..enums import ModelType as M
from . import FamilyInfo
from .sd15 import SD_LORA, SD_PARTS

_SD2 = FamilyInfo(SD_PARTS, "unet", ("text_encoder",), implemented=True, diffusers_lora=SD_LORA)

FAMILIES = {
    M.STABLE_DIFFUSION_20: replace(_SD2, preset="sd20-lora", preset_note="768 px, v-prediction"),
    M.STABLE_DIFFUSION_20_BASE: replace(_SD2, preset="sd20-base-lora", preset_note="512 px"),
    M.STABLE_DIFFUSION_21: replace(_SD2, preset="sd21-lora", preset_note="768 px, v-prediction"),
    M.STABLE_DIFFUSION_21_BASE: replace(_SD2, preset="sd21-base-lora", preset_note="512 px"),
}
