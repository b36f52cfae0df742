"""What each model family has, without importing torch: its model parts (the config sections
the page shows and the trainer reads), the training methods it supports, and whether the
trainer implements it yet.

The model registry (ot_gradio/models) must agree with this table; tests/models/test_model_registry.py
checks that every implemented family here has a registered class with these parts.
"""

from __future__ import annotations

from dataclasses import dataclass

from .enums import ModelType as M
from .enums import TrainingMethod as T

ALL_METHODS = (T.LORA, T.FINE_TUNE, T.EMBEDDING)
# the methods the trainer implements (ot_gradio/training/methods.py registers each)
IMPLEMENTED_METHODS = (T.LORA, T.FINE_TUNE, T.EMBEDDING)


@dataclass(frozen=True)
class FamilyInfo:
    parts: tuple[str, ...]          # every config part section the family uses, denoiser first
    denoiser: str                   # the part that predicts noise
    text_encoders: tuple[str, ...]  # text encoder parts, in order
    methods: tuple[T, ...] = ALL_METHODS
    implemented: bool = False       # the trainer can train it today
    inpainting: bool = False        # the denoiser takes the masked image and the mask as input
    bucket_step: int | None = None  # image sizes must be multiples of this (None: the data default)
    schedule: str = "ddpm"          # the training objective: "ddpm" or "flow_matching" (training/schedules.py)
    learns_variance: bool = False   # the denoiser also predicts its variance, trained with the VB loss (PixArt)


_SD = FamilyInfo(("unet", "text_encoder", "vae"), "unet", ("text_encoder",))
_SD_INPAINT = FamilyInfo(("unet", "text_encoder", "vae"), "unet", ("text_encoder",), implemented=True, inpainting=True)
_SD2 = FamilyInfo(_SD.parts, "unet", _SD.text_encoders, implemented=True)
_SDXL = FamilyInfo(("unet", "text_encoder", "text_encoder_2", "vae"), "unet", ("text_encoder", "text_encoder_2"), implemented=True)
# SD 3 / 3.5: CLIP-L, CLIP-G and T5 (models/sd3.py)
_SD3 = FamilyInfo(
    ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"), "transformer",
    ("text_encoder", "text_encoder_2", "text_encoder_3"), implemented=True, bucket_step=16, schedule="flow_matching",
)

FAMILIES: dict[M, FamilyInfo] = {
    M.STABLE_DIFFUSION_15: FamilyInfo(_SD.parts, "unet", _SD.text_encoders, implemented=True),
    M.STABLE_DIFFUSION_15_INPAINTING: _SD_INPAINT,
    M.STABLE_DIFFUSION_20: _SD2,
    M.STABLE_DIFFUSION_20_BASE: _SD2,
    M.STABLE_DIFFUSION_20_INPAINTING: _SD_INPAINT,
    M.STABLE_DIFFUSION_21: _SD2,
    M.STABLE_DIFFUSION_21_BASE: _SD2,
    M.STABLE_DIFFUSION_XL_10_BASE: _SDXL,
    M.STABLE_DIFFUSION_XL_10_BASE_INPAINTING: FamilyInfo(_SDXL.parts, "unet", _SDXL.text_encoders, implemented=True, inpainting=True),
    M.WUERSTCHEN_2: FamilyInfo(
        ("prior", "text_encoder", "decoder", "decoder_text_encoder", "decoder_vqgan", "effnet_encoder"),
        "prior", ("text_encoder",), implemented=True,
    ),
    M.STABLE_CASCADE_1: FamilyInfo(
        ("prior", "text_encoder", "decoder", "decoder_vqgan", "effnet_encoder"), "prior", ("text_encoder",), implemented=True
    ),
    M.PIXART_ALPHA: FamilyInfo(("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), implemented=True, bucket_step=16, learns_variance=True),
    M.PIXART_SIGMA: FamilyInfo(("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), implemented=True, bucket_step=16, learns_variance=True),
    M.STABLE_DIFFUSION_3: _SD3,
    M.STABLE_DIFFUSION_35: _SD3,
    M.FLUX_DEV_1: FamilyInfo(
        ("transformer", "text_encoder", "text_encoder_2", "vae"), "transformer", ("text_encoder", "text_encoder_2"),
        implemented=True, bucket_step=16, schedule="flow_matching",
    ),
    # Flux.1 Fill dev: Flux.1 dev reading the masked image and the mask too (models/flux_fill.py)
    M.FLUX_FILL_DEV_1: FamilyInfo(
        ("transformer", "text_encoder", "text_encoder_2", "vae"), "transformer", ("text_encoder", "text_encoder_2"),
        implemented=True, inpainting=True, bucket_step=16, schedule="flow_matching",
    ),
    M.CHROMA_1: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), implemented=True, bucket_step=16,
        schedule="flow_matching",
    ),
    # Z-Image: one Qwen3 text encoder; FINE_TUNE and LORA, as OneTrainer (models/z_image.py)
    M.Z_IMAGE: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE),
        implemented=True, bucket_step=16, schedule="flow_matching",
    ),
    # Flux.2 dev (Mistral3 text encoder) and Klein (Qwen3): one model type, as OneTrainer (models/flux2.py)
    M.FLUX_2: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE),
        implemented=True, bucket_step=16, schedule="flow_matching",
    ),
    # Qwen-Image: one Qwen2.5-VL text encoder, a video VAE used one frame at a time (models/qwen_image.py)
    M.QWEN: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE),
        implemented=True, bucket_step=16, schedule="flow_matching",
    ),
    # Sana: one Gemma 2 text encoder, the DC-AE (32x) and a patch-1 transformer (models/sana.py)
    M.SANA: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE, T.EMBEDDING),
        implemented=True, bucket_step=32, schedule="flow_matching",
    ),
}

# Parts that never train in any supported method (image encoders/decoders); the page shows only
# their data type.
FROZEN_PARTS = ("vae", "effnet_encoder", "decoder", "decoder_text_encoder", "decoder_vqgan")


def family_info(model_type: M | str) -> FamilyInfo | None:
    try:
        return FAMILIES.get(M(model_type))
    except ValueError:
        return None


def is_flow_matching(model_type: M | str) -> bool:
    info = family_info(model_type)
    return bool(info and info.schedule == "flow_matching")


def implemented_model_types() -> tuple[M, ...]:
    return tuple(m for m, info in FAMILIES.items() if info.implemented)


def supports(model_type: M | str, method: T | str) -> bool:
    info = family_info(model_type)
    return bool(info and info.implemented and T(method) in info.methods and T(method) in IMPLEMENTED_METHODS)


def trainable_parts(model_type: M | str) -> tuple[str, ...]:
    """The parts a method may train: the denoiser and the text encoders."""
    info = family_info(model_type)
    return (info.denoiser, *info.text_encoders) if info else ("unet", "text_encoder")
