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
    # (LoRA file layout "kohya" / "diffusers", part, why): parts no reader loads from such a file
    # (refused); a diffusers-layout text encoder of a family with a diffusers LoRA loader is
    # decided by DIFFUSERS_LORA_TEXT_ENCODERS below instead
    lora_unread: tuple[tuple[str, str, str], ...] = ()


_T5_NO_COMFY = "and ComfyUI has no diffusers name for T5"


_SD = FamilyInfo(("unet", "text_encoder", "vae"), "unet", ("text_encoder",))
_SD_INPAINT = FamilyInfo(("unet", "text_encoder", "vae"), "unet", ("text_encoder",), implemented=True, inpainting=True)
_SD2 = FamilyInfo(_SD.parts, "unet", _SD.text_encoders, implemented=True)
_SDXL = FamilyInfo(("unet", "text_encoder", "text_encoder_2", "vae"), "unet", ("text_encoder", "text_encoder_2"), implemented=True)
# SD 3 / 3.5: CLIP-L, CLIP-G and T5 (models/sd3.py)
_SD3 = FamilyInfo(
    ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"), "transformer",
    ("text_encoder", "text_encoder_2", "text_encoder_3"), implemented=True, bucket_step=16, schedule="flow_matching",
)
_PIXART_T5 = (("diffusers", "text_encoder", f"diffusers has no PixArt LoRA loader, {_T5_NO_COMFY}"),)

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
    M.PIXART_ALPHA: FamilyInfo(("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), implemented=True, bucket_step=16,
                               learns_variance=True, lora_unread=_PIXART_T5),
    M.PIXART_SIGMA: FamilyInfo(("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), implemented=True, bucket_step=16,
                               learns_variance=True, lora_unread=_PIXART_T5),
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
        lora_unread=(("kohya", "text_encoder", "ComfyUI has no Sana model and diffusers reads no kohya Sana file"),),
    ),
}

# The text encoders the family's diffusers pipeline loads a LoRA into (its LoraLoaderMixin's
# `_lora_loadable_modules`, diffusers 0.42), with the pipeline's name. A DIFFUSERS_LORA file of a
# text encoder outside them is refused before the run (config/doctor.py): FluxPipeline skips T5,
# Qwen-Image, Z-Image, Sana and Flux.2 load the transformer only, and ChromaPipeline raises on
# its T5 part after it has changed the transformer. Families not listed have no load_lora_weights.
DIFFUSERS_LORA_TEXT_ENCODERS: dict[M, tuple[str, tuple[str, ...]]] = {
    **{m: ("StableDiffusionPipeline", ("text_encoder",)) for m in (
        M.STABLE_DIFFUSION_15, M.STABLE_DIFFUSION_15_INPAINTING, M.STABLE_DIFFUSION_20, M.STABLE_DIFFUSION_20_BASE,
        M.STABLE_DIFFUSION_20_INPAINTING, M.STABLE_DIFFUSION_21, M.STABLE_DIFFUSION_21_BASE)},
    M.STABLE_DIFFUSION_XL_10_BASE: ("StableDiffusionXLPipeline", ("text_encoder", "text_encoder_2")),
    M.STABLE_DIFFUSION_XL_10_BASE_INPAINTING: ("StableDiffusionXLInpaintPipeline", ("text_encoder", "text_encoder_2")),
    M.STABLE_DIFFUSION_3: ("StableDiffusion3Pipeline", ("text_encoder", "text_encoder_2")),
    M.STABLE_DIFFUSION_35: ("StableDiffusion3Pipeline", ("text_encoder", "text_encoder_2")),
    M.FLUX_DEV_1: ("FluxPipeline", ("text_encoder",)),
    M.FLUX_FILL_DEV_1: ("FluxFillPipeline", ("text_encoder",)),
    M.CHROMA_1: ("ChromaPipeline", ()),
    M.Z_IMAGE: ("ZImagePipeline", ()),
    M.FLUX_2: ("Flux2Pipeline", ()),
    M.QWEN: ("QwenImagePipeline", ()),
    M.SANA: ("SanaPipeline", ()),
}
# Denoiser layers that ComfyUI does not map from a diffusers-layout LoRA (its diffusers-name map
# covers Flux.1's layout; Chroma's guidance layer and Flux.2's own layers have no entry there),
# with the layer presets that train them: such a file is warned about, KOHYA/COMFY files load them
# (scripts/check_comfyui_lora.py measures both layouts with ComfyUI's own code)
DIFFUSERS_LORA_COMFY_GAPS: dict[M, tuple[str, tuple[str, ...]]] = {
    M.CHROMA_1: ("distilled_guidance_layer", ("full", "custom")),
    M.FLUX_2: ("modulation, feed-forward, single blocks' fused projections and time/guidance embedder",
               ("full", "attn-mlp", "attn-only", "blocks", "custom")),
}
# what each family's text encoders are, for messages
TEXT_ENCODER_NAMES: dict[M, tuple[str, ...]] = {
    M.STABLE_DIFFUSION_3: ("CLIP-L", "CLIP-G", "T5"), M.STABLE_DIFFUSION_35: ("CLIP-L", "CLIP-G", "T5"),
    M.FLUX_DEV_1: ("CLIP-L", "T5"), M.FLUX_FILL_DEV_1: ("CLIP-L", "T5"), M.CHROMA_1: ("T5",), M.Z_IMAGE: ("Qwen3",),
    M.FLUX_2: ("Mistral / Qwen3",), M.QWEN: ("Qwen2.5-VL",), M.SANA: ("Gemma 2",),
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
