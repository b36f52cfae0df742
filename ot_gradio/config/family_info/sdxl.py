"""Stable Diffusion XL and its inpainting model (models/sdxl.py)."""

from ..enums import ModelType as M
from . import FamilyInfo, Sign
from ._sizes import CLIP_G, CLIP_L, INPAINT_EXTRA, VAE
from .sd15 import SD_CIRCULAR, SD_COMFY_GAP

_PARTS, _TES = ("unet", "text_encoder", "text_encoder_2", "vae"), ("text_encoder", "text_encoder_2")
# SDXL base 1.0: unet/config.json (transformer depth 1/2/10, text_time embedding); second text
# encoder OpenCLIP ViT-bigG with its 1280x1280 projection.
_GAP = ("attention (`attn1`, `attn2`) and CLIP-G's `text_projection`", SD_COMFY_GAP[1])
_PARAMS = {"unet": 2_567_463_684, "text_encoder": CLIP_L, "text_encoder_2": CLIP_G, "vae": VAE}

FAMILIES = {
    M.STABLE_DIFFUSION_XL_10_BASE: FamilyInfo(
        _PARTS, "unet", _TES, implemented=True, diffusers_lora=("StableDiffusionXLPipeline", _TES),
        preset="sdxl-lora", preset_note="1024 px", params=_PARAMS, comfy_gap=_GAP, safetensors_lora="kohya", circular_padding=SD_CIRCULAR),
    M.STABLE_DIFFUSION_XL_10_BASE_INPAINTING: FamilyInfo(
        _PARTS, "unet", _TES, implemented=True, inpainting=True, diffusers_lora=("StableDiffusionXLInpaintPipeline", _TES),
        preset="sdxl-inpainting-lora", preset_note="masks optional", comfy_gap=_GAP, safetensors_lora="kohya", circular_padding=SD_CIRCULAR,
        params={**_PARAMS, "unet": _PARAMS["unet"] + INPAINT_EXTRA}),
}
SIGN = Sign("Stable Diffusion XL", tuple(FAMILIES), ("StableDiffusionXL",), ("sdxl", "sd_xl", "stable-diffusion-xl"))
