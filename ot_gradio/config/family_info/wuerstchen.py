"""Würstchen 2 (models/wuerstchen.py)."""

from ..enums import ModelType as M
from . import FamilyInfo, Sign

FAMILIES = {
    M.WUERSTCHEN_2: FamilyInfo(
        ("prior", "text_encoder", "decoder", "decoder_text_encoder", "decoder_vqgan", "effnet_encoder"),
        "prior", ("text_encoder",), implemented=True,
        preset="wuerstchen2-lora", preset_note="trains the prior; the decoder comes from warp-ai/wuerstchen",
    ),
}
SIGN = Sign("Würstchen", (M.WUERSTCHEN_2,), ("Wuerstchen",), ("wuerstchen",))
