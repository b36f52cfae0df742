"""Würstchen 2 (models/wuerstchen.py)."""

from ..enums import ModelType as M
from . import FamilyInfo, Sign
from ._sizes import EFFNET, PAELLA_VQ

# the parts OneTrainer pads circularly (BaseWuerstchenSetup, Würstchen 2 and Stable Cascade): samples tile
CASCADE_CIRCULAR = ("prior", "decoder", "decoder_vqgan")
CASCADE_QUANTIZATION = 128  # OneTrainer's aspect bucket sides (WuerstchenBaseDataLoader, both families)
FAMILIES = {
    M.WUERSTCHEN_2: FamilyInfo(
        ("prior", "text_encoder", "decoder", "decoder_text_encoder", "decoder_vqgan", "effnet_encoder"),
        "prior", ("text_encoder",), implemented=True, circular_padding=CASCADE_CIRCULAR, bucket_quantization=CASCADE_QUANTIZATION,
        preset="wuerstchen2-lora", preset_note="trains the prior; the decoder comes from warp-ai/wuerstchen",
        # WuerstchenPrior(c=1536, depth=32, nhead=24) with the OpenCLIP bigG text model (no
        # projection); decoder WuerstchenDiffNeXt() defaults with the OpenCLIP ViT-H text model
        params={"prior": 993_636_896, "text_encoder": 693_021_440, "decoder": 1_055_365_280,
                "decoder_text_encoder": 352_984_064, "decoder_vqgan": PAELLA_VQ, "effnet_encoder": EFFNET + 32},
    ),
}
SIGN = Sign("Würstchen", (M.WUERSTCHEN_2,), ("Wuerstchen",), ("wuerstchen",))
