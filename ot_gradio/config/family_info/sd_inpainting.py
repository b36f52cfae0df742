"""Stable Diffusion 1.5 and 2.0 inpainting (models/sd_inpainting.py)."""

from ..enums import ModelType as M
from . import FamilyInfo
from .sd15 import SD_LORA, SD_PARTS

_INPAINT = FamilyInfo(SD_PARTS, "unet", ("text_encoder",), implemented=True, inpainting=True, diffusers_lora=SD_LORA)

FAMILIES = {M.STABLE_DIFFUSION_15_INPAINTING: _INPAINT, M.STABLE_DIFFUSION_20_INPAINTING: _INPAINT}
