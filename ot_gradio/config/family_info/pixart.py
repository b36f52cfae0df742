"""PixArt-α (models/pixart.py); its sign covers PixArt-Σ too."""

from dataclasses import replace

from ..enums import ModelType as M
from . import FamilyInfo, Sign
from ._sizes import T5_XXL, VAE

T5_NO_COMFY = "and ComfyUI has no diffusers name for T5"
PIXART = FamilyInfo(
    ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), implemented=True, transformer_file=True, bucket_step=16,
    learns_variance=True, bucket_quantization=16,  # OneTrainer's aspect bucket sides (PixArtAlphaBaseDataLoader, α and Σ)
    lora_unread=(("diffusers", "text_encoder", f"diffusers has no PixArt LoRA loader, {T5_NO_COMFY}"),),
)

# PixArt-α XL/2 1024: 28 blocks of width 1152 with the resolution/aspect embedders; T5 v1.1 XXL
# encoder; the SD VAE
FAMILIES = {M.PIXART_ALPHA: replace(PIXART, token_window=120, preset="pixart-alpha-lora", preset_note="120 T5 tokens",
                                    params={"transformer": 611_349_152, "text_encoder": T5_XXL, "vae": VAE},
                                    name="PixArt-α", hub_repo="PixArt-alpha/PixArt-XL-2-1024-MS", lora_version="pixart_alpha")}
SIGN = Sign("PixArt", (M.PIXART_ALPHA, M.PIXART_SIGMA), ("PixArt",), ("pixart",))
