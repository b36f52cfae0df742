"""Stable Cascade (models/stable_cascade.py)."""

from ..enums import ModelType as M
from . import FamilyInfo, Sign

FAMILIES = {
    M.STABLE_CASCADE_1: FamilyInfo(
        ("prior", "text_encoder", "decoder", "decoder_vqgan", "effnet_encoder"), "prior", ("text_encoder",), implemented=True,
        preset="cascade-lora", preset_note="trains the prior (stage C); the decoder comes from stabilityai/stable-cascade",
    ),
}
SIGN = Sign("Stable Cascade", (M.STABLE_CASCADE_1,), ("StableCascade",), ("cascade",))
