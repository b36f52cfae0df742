"""Stable Diffusion 3 / 3.5: CLIP-L, CLIP-G and T5 (models/sd3.py)."""

from dataclasses import replace

from ..enums import ModelType as M
from . import FamilyInfo, Sign

_SD3 = FamilyInfo(
    ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"), "transformer",
    ("text_encoder", "text_encoder_2", "text_encoder_3"), implemented=True, bucket_step=16, schedule="flow_matching",
    diffusers_lora=("StableDiffusion3Pipeline", ("text_encoder", "text_encoder_2")),
    text_encoder_labels=("CLIP-L", "CLIP-G", "T5"),
)

FAMILIES = {
    M.STABLE_DIFFUSION_3: replace(_SD3, preset="sd3-lora", preset_note="KOHYA_LORA for ComfyUI"),
    M.STABLE_DIFFUSION_35: replace(_SD3, preset="sd35-lora", preset_note="SD 3.5 Medium; set the base model for Large"),
}
SIGN = Sign("Stable Diffusion 3", tuple(FAMILIES), ("StableDiffusion3",), ("sd3", "sd3.5", "sd35", "stable-diffusion-3"))
