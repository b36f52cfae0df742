"""PixArt-α (models/pixart.py); its sign covers PixArt-Σ too."""

from dataclasses import replace

from ..enums import ModelType as M
from . import FamilyInfo, Sign

T5_NO_COMFY = "and ComfyUI has no diffusers name for T5"
PIXART = FamilyInfo(
    ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), implemented=True, bucket_step=16,
    learns_variance=True,
    lora_unread=(("diffusers", "text_encoder", f"diffusers has no PixArt LoRA loader, {T5_NO_COMFY}"),),
)

FAMILIES = {M.PIXART_ALPHA: replace(PIXART, preset="pixart-alpha-lora", preset_note="120 T5 tokens")}
SIGN = Sign("PixArt", (M.PIXART_ALPHA, M.PIXART_SIGMA), ("PixArt",), ("pixart",))
