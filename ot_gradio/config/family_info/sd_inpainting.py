"""Stable Diffusion 1.5 and 2.0 inpainting (models/sd_inpainting.py)."""

from dataclasses import replace

from ..enums import ModelType as M
from . import FamilyInfo
from ._sizes import INPAINT_EXTRA
from .sd2 import SD2_PARAMS
from .sd15 import SD15_PARAMS, SD_CIRCULAR, SD_COMFY_GAP, SD_LORA, SD_METHODS, SD_PARTS, SD_QUANTIZATION

_INPAINT = FamilyInfo(SD_PARTS, "unet", ("text_encoder",), implemented=True, methods=SD_METHODS, inpainting=True, diffusers_lora=SD_LORA,
                     comfy_gap=SD_COMFY_GAP, safetensors_lora="kohya", circular_padding=SD_CIRCULAR, bucket_quantization=SD_QUANTIZATION)

FAMILIES = {
    M.STABLE_DIFFUSION_15_INPAINTING: replace(
        _INPAINT, preset="sd15-inpainting-lora", preset_note="masks optional (`<name>-masklabel.png`, white = repaint)",
        params={**SD15_PARAMS, "unet": SD15_PARAMS["unet"] + INPAINT_EXTRA}),
    M.STABLE_DIFFUSION_20_INPAINTING: replace(_INPAINT, preset="sd20-inpainting-lora", preset_note="masks optional",
                                              params={**SD2_PARAMS, "unet": SD2_PARAMS["unet"] + INPAINT_EXTRA}),
}
