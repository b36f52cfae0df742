"""Qwen-Image: one Qwen2.5-VL text encoder, a video VAE used one frame at a time (models/qwen_image.py)."""

from ..enums import ModelType as M
from ..enums import TrainingMethod as T
from . import FamilyInfo, Sign

FAMILIES = {
    M.QWEN: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE),
        implemented=True, bucket_step=16, schedule="flow_matching", diffusers_lora=("QwenImagePipeline", ()),
        text_encoder_labels=("Qwen2.5-VL",), preset="qwen-image-lora",
        preset_note="FLOAT_8 transformer and text encoder, part of the transformer offloaded to RAM",
    ),
}
SIGN = Sign("Qwen-Image", (M.QWEN,), ("QwenImage",), ("qwen-image", "qwen_image", "qwenimage"))
