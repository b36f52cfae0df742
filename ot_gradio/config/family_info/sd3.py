"""Stable Diffusion 3 / 3.5: CLIP-L, CLIP-G and T5 (models/sd3.py)."""

from ..enums import ModelType as M
from . import FamilyInfo, Sign

_SD3 = FamilyInfo(
    ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"), "transformer",
    ("text_encoder", "text_encoder_2", "text_encoder_3"), implemented=True, bucket_step=16, schedule="flow_matching",
    diffusers_lora=("StableDiffusion3Pipeline", ("text_encoder", "text_encoder_2")),
    text_encoder_labels=("CLIP-L", "CLIP-G", "T5"),
)

FAMILIES = {M.STABLE_DIFFUSION_3: _SD3, M.STABLE_DIFFUSION_35: _SD3}
SIGN = Sign("Stable Diffusion 3", tuple(FAMILIES), ("StableDiffusion3",), ("sd3", "sd3.5", "sd35", "stable-diffusion-3"))
