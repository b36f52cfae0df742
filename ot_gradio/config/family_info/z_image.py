"""Z-Image: one Qwen3 text encoder; FINE_TUNE and LORA, as OneTrainer (models/z_image.py)."""

from ..enums import ModelType as M
from ..enums import TrainingMethod as T
from . import FamilyInfo, Sign

FAMILIES = {
    M.Z_IMAGE: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE),
        implemented=True, bucket_step=16, schedule="flow_matching", diffusers_lora=("ZImagePipeline", ()),
        text_encoder_labels=("Qwen3",), preset="z-image-lora", preset_note="FLOAT_8 transformer and Qwen3",
    ),
}
SIGN = Sign("Z-Image", (M.Z_IMAGE,), ("ZImage",), ("z-image", "z_image", "zimage"))
