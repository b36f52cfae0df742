"""Stable Cascade (models/stable_cascade.py)."""

from ..enums import ModelType as M
from . import FamilyInfo, Sign

FAMILIES = {
    M.STABLE_CASCADE_1: FamilyInfo(
        ("prior", "text_encoder", "decoder", "decoder_vqgan", "effnet_encoder"), "prior", ("text_encoder",), implemented=True,
    ),
}
SIGN = Sign("Stable Cascade", (M.STABLE_CASCADE_1,), ("StableCascade",), ("cascade",))
