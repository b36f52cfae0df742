"""PixArt-Σ (models/pixart_sigma.py): PixArt-α's description."""

from ..enums import ModelType as M
from .pixart import PIXART

FAMILIES = {M.PIXART_SIGMA: PIXART}
