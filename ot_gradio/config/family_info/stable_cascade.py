"""Stable Cascade (models/stable_cascade.py)."""

from ..enums import ModelType as M
from . import FamilyInfo, Sign
from ._sizes import EFFNET, PAELLA_VQ
from .wuerstchen import CASCADE_CIRCULAR, CASCADE_QUANTIZATION

FAMILIES = {
    M.STABLE_CASCADE_1: FamilyInfo(
        ("prior", "text_encoder", "decoder", "decoder_vqgan", "effnet_encoder"), "prior", ("text_encoder",), implemented=True, circular_padding=CASCADE_CIRCULAR,
        bucket_quantization=CASCADE_QUANTIZATION,
        preset="cascade-lora", preset_note="trains the prior (stage C); the decoder comes from stabilityai/stable-cascade",
        # the big stage C (StableCascadeUNet, 2048 wide, 8+24 blocks) and the big stage B
        # (320..1280, 2/6/28/6 blocks); bigG text model with projection
        params={"prior": 3_589_103_632, "text_encoder": 694_659_840, "decoder": 1_562_941_136,
                "decoder_vqgan": PAELLA_VQ, "effnet_encoder": EFFNET},
    ),
}
SIGN = Sign("Stable Cascade", (M.STABLE_CASCADE_1,), ("StableCascade",), ("cascade",))
