"""Stable Diffusion XL and its inpainting model (models/sdxl.py)."""

from ..enums import ModelType as M
from . import FamilyInfo, Sign

_PARTS, _TES = ("unet", "text_encoder", "text_encoder_2", "vae"), ("text_encoder", "text_encoder_2")

FAMILIES = {
    M.STABLE_DIFFUSION_XL_10_BASE: FamilyInfo(
        _PARTS, "unet", _TES, implemented=True, diffusers_lora=("StableDiffusionXLPipeline", _TES),
        preset="sdxl-lora", preset_note="1024 px"),
    M.STABLE_DIFFUSION_XL_10_BASE_INPAINTING: FamilyInfo(
        _PARTS, "unet", _TES, implemented=True, inpainting=True, diffusers_lora=("StableDiffusionXLInpaintPipeline", _TES),
        preset="sdxl-inpainting-lora", preset_note="masks optional"),
}
SIGN = Sign("Stable Diffusion XL", tuple(FAMILIES), ("StableDiffusionXL",), ("sdxl", "sd_xl", "stable-diffusion-xl"))
