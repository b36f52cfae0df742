"""PixArt-Σ (models/pixart_sigma.py): PixArt-α's description."""

from dataclasses import replace

from ..enums import ModelType as M
from .pixart import PIXART

FAMILIES = {M.PIXART_SIGMA: replace(PIXART, preset="pixart-sigma-lora", preset_note="300 T5 tokens")}
