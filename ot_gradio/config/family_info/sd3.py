"""Stable Diffusion 3 / 3.5: CLIP-L, CLIP-G and T5 (models/sd3.py)."""

from dataclasses import replace

from ..enums import ModelType as M
from . import SDP_ATTENTION, FamilyInfo, Sign
from ._sizes import CLIP_G, CLIP_L_PROJ, T5_XXL, VAE16

_SD3 = FamilyInfo(
    ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"), "transformer",
    ("text_encoder", "text_encoder_2", "text_encoder_3"), implemented=True, text_encoder_files=True, bucket_step=16, schedule="flow_matching", zeroes_padding=True,
    attention=SDP_ATTENTION, diffusers_lora=("StableDiffusion3Pipeline", ("text_encoder", "text_encoder_2")),
    text_encoder_labels=("CLIP-L", "CLIP-G", "T5"),
    includable=("text_encoder", "text_encoder_2", "text_encoder_3"),
)
_ENCODERS = {"text_encoder": CLIP_L_PROJ, "text_encoder_2": CLIP_G, "text_encoder_3": T5_XXL, "vae": VAE16}

FAMILIES = {
    # stabilityai/stable-diffusion-3(.5) transformer/config.json: SD 3 medium 24 MMDiT blocks of 1536,
    # SD 3.5 large 38 blocks of 2432 with RMS q/k norms; a VAE of 16 latent channels
    M.STABLE_DIFFUSION_3: replace(_SD3, preset="sd3-lora", preset_note="KOHYA_LORA for ComfyUI",
                                  params={"transformer": 2_028_328_000, **_ENCODERS},
                                  name="SD 3", hub_repo="stabilityai/stable-diffusion-3-medium-diffusers", lora_version="sd3"),
    M.STABLE_DIFFUSION_35: replace(_SD3, preset="sd35-lora", preset_note="SD 3.5 Medium; set the base model for Large",
                                   params={"transformer": 8_056_627_520, **_ENCODERS},
                                   name="SD 3.5", hub_repo="stabilityai/stable-diffusion-3.5-large", lora_version="sd3.5"),
}
SIGN = Sign("Stable Diffusion 3", tuple(FAMILIES), ("StableDiffusion3",), ("sd3", "sd3.5", "sd35", "stable-diffusion-3"))
