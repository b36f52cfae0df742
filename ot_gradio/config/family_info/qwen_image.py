"""Qwen-Image: one Qwen2.5-VL text encoder, a video VAE used one frame at a time (models/qwen_image.py)."""

from ..enums import ModelType as M
from . import Sign, flow_transformer

FAMILIES = {
    M.QWEN: flow_transformer(
        "QwenImagePipeline", token_window=512, text_encoder_files=True, name="Qwen-Image", hub_repo="Qwen/Qwen-Image", lora_version="qwen_image",
        text_encoder_labels=("Qwen2.5-VL",), preset="qwen-image-lora",
        preset_note="FLOAT_8 transformer and text encoder, part of the transformer offloaded to RAM",
        # Qwen/Qwen-Image (QwenImageTransformer2DModel's defaults, 60 blocks of 24 x 128),
        # Qwen2.5-VL-7B-Instruct as Qwen2_5_VLForConditionalGeneration (28 layers of 3584, untied
        # lm_head of 545 M and the 677 M vision tower, neither run for prompts) and
        # AutoencoderKLQwenImage's defaults (16 latent channels)
        params={"transformer": 20_430_401_088, "text_encoder": 8_292_166_656, "vae": 126_892_531},
    ),
}
SIGN = Sign("Qwen-Image", (M.QWEN,), ("QwenImage",), ("qwen-image", "qwen_image", "qwenimage"))
