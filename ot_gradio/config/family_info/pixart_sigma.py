"""PixArt-Σ (models/pixart_sigma.py): PixArt-α's description."""

from dataclasses import replace

from ..enums import ModelType as M
from ._sizes import T5_XXL, VAE
from .pixart import PIXART

# PixArt-Σ XL/2: α's transformer without the size embedders (use_additional_conditions off)
FAMILIES = {M.PIXART_SIGMA: replace(PIXART, token_window=300, preset="pixart-sigma-lora", preset_note="300 T5 tokens",
                                    params={"transformer": 610_856_096, "text_encoder": T5_XXL, "vae": VAE},
                                    name="PixArt-Σ", hub_repo="PixArt-alpha/PixArt-Sigma-XL-2-1024-MS", lora_version="pixart_sigma")}
