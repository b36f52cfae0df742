"""What each model family has, without importing torch, collected from the families'
descriptions (config/family_info/<family>.py, one per family module in ot_gradio/models): its
model parts (the config sections the page shows and the trainer reads), the training methods it
supports, whether the trainer implements it yet, and the LoRA facts the doctor checks. The family
classes read the same descriptions (models/registry.register_family), so a fact is written once.
"""

from __future__ import annotations

from .enums import DIFFUSERS_LORA_FORMATS, KOHYA_LORA_FORMATS, ModelFormat
from .enums import ModelType as M
from .enums import TrainingMethod as T
from .family_info import ALL_METHODS, FamilyInfo, collect

__all__ = ["ALL_METHODS", "FamilyInfo"]

# the methods the trainer implements (ot_gradio/training/methods.py registers each)
IMPLEMENTED_METHODS = (T.LORA, T.FINE_TUNE, T.EMBEDDING, T.FINE_TUNE_VAE)

FAMILIES: dict[M, FamilyInfo]
FAMILIES, SIGNS = collect()

# The text encoders the family's diffusers pipeline loads a LoRA into, with the pipeline's name
# (FamilyInfo.diffusers_lora); families not listed have no load_lora_weights.
DIFFUSERS_LORA_TEXT_ENCODERS: dict[M, tuple[str, tuple[str, ...]]] = {
    m: info.diffusers_lora for m, info in FAMILIES.items() if info.diffusers_lora is not None}
# Denoiser layers ComfyUI does not map from a diffusers-layout LoRA (FamilyInfo.comfy_gap)
DIFFUSERS_LORA_COMFY_GAPS: dict[M, tuple[str, tuple[str, ...]]] = {
    m: info.comfy_gap for m, info in FAMILIES.items() if info.comfy_gap is not None}
# Why a kohya-layout LoRA of the family loads in no other program (FamilyInfo.kohya_unread)
KOHYA_LORA_UNREAD: dict[M, str] = {m: info.kohya_unread for m, info in FAMILIES.items() if info.kohya_unread}
# what each family's text encoders are, for messages
TEXT_ENCODER_NAMES: dict[M, tuple[str, ...]] = {
    m: info.text_encoder_labels for m, info in FAMILIES.items() if info.text_encoder_labels}

# Parts that never train in any supported method (image encoders/decoders, Ideogram 4's
# unconditional transformer); the page shows only their data type.
FROZEN_PARTS = ("vae", "effnet_encoder", "decoder", "decoder_text_encoder", "decoder_vqgan", "unconditional_transformer")


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


def lora_layout(model_type: M | str, fmt: ModelFormat | str) -> str | None:
    """The key layout of a LoRA saved as `fmt`: "kohya", "diffusers", or None (a format no LoRA is
    written in). SAFETENSORS, and LEGACY_LORA (what OneTrainer's migration renames a SAFETENSORS LoRA
    to), take the family's layout (FamilyInfo.safetensors_lora)."""
    fmt = ModelFormat(fmt)
    if fmt in KOHYA_LORA_FORMATS:
        return "kohya"
    if fmt in DIFFUSERS_LORA_FORMATS:
        return "diffusers"
    if fmt in (ModelFormat.SAFETENSORS, ModelFormat.LEGACY_LORA):  # newer OneTrainer's name for its SAFETENSORS LoRA
        info = family_info(model_type)
        return info.safetensors_lora if info else "diffusers"
    return None


def includable_parts(model_type: M | str) -> tuple[str, ...]:
    """The parts `<part>.include: false` leaves out for this model type (FamilyInfo.includable): ()
    where OneTrainer offers no such switch and every part loads."""
    info = family_info(model_type)
    return info.includable if info else ()


def trainable_parts(model_type: M | str) -> tuple[str, ...]:
    """The parts a method may train: the denoiser and the text encoders."""
    info = family_info(model_type)
    return (info.denoiser, *info.text_encoders) if info else ("unet", "text_encoder")
