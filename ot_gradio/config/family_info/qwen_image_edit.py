"""Qwen-Image-Edit: Qwen-Image's parts, trained on (image, `-control` image) pairs; the control
image reaches both the Qwen2.5-VL text encoder (with the prompt) and the transformer (its latents
after the noisy ones) (models/qwen_image_edit.py). Not in OneTrainer."""

from ..enums import ModelType as M
from . import Sign, flow_transformer
from .qwen_image import FAMILIES as QWEN

FAMILIES = {
    M.QWEN_IMAGE_EDIT: flow_transformer(
        "QwenImageEditPipeline", name="Qwen-Image-Edit", hub_repo="Qwen/Qwen-Image-Edit", lora_version="qwen_image_edit",
        control_image=True, text_encoder_files=True, text_encoder_labels=("Qwen2.5-VL",), preset="qwen-image-edit-lora",
        preset_note="needs pairs: `<name>-control.png` (the source image) beside each `<name>.png` (the edited one); "
                    "FLOAT_8 transformer and text encoder",
        # Qwen/Qwen-Image-Edit: Qwen-Image's transformer, Qwen2.5-VL 7B and VAE at the same sizes
        params=dict(QWEN[M.QWEN].params),
    ),
}
SIGN = Sign("Qwen-Image-Edit", (M.QWEN_IMAGE_EDIT,), ("QwenImageEdit",), ("qwen-image-edit", "qwen_image_edit", "qwenimageedit"))
