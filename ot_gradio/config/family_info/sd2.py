"""Stable Diffusion 2.0 / 2.1 and their 512 px bases (models/sd2.py)."""

from ..enums import ModelType as M
from . import FamilyInfo
from .sd15 import SD_LORA, SD_PARTS

_SD2 = FamilyInfo(SD_PARTS, "unet", ("text_encoder",), implemented=True, diffusers_lora=SD_LORA)

FAMILIES = {m: _SD2 for m in (M.STABLE_DIFFUSION_20, M.STABLE_DIFFUSION_20_BASE, M.STABLE_DIFFUSION_21,
                              M.STABLE_DIFFUSION_21_BASE)}
