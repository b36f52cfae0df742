"""When an option applies: the conditions an `opt(..., applies_when=...)` line names.

A condition reads the config as the page holds it (a dict of plain values, any of them blank
or missing while the user edits), so each one says what a missing value counts as. The page
shows an option only while its condition holds; nothing here changes what the trainer reads.
Torch-free and gradio-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .families import family_info, is_flow_matching, trainable_parts

Config = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    """A condition on other fields of the config: `reads` names them (top-level fields of the
    schema), `text` says it in words (docs, test output)."""

    test: Callable[[Config], Any]
    reads: tuple[str, ...]
    text: str

    def __call__(self, config: Config) -> Any:
        return self.test(config)

    def __and__(self, other: Rule) -> Rule:
        return Rule(lambda c: self(c) and other(c), (*self.reads, *other.reads), f"{self.text} and {other.text}")

    def __or__(self, other: Rule) -> Rule:
        return Rule(lambda c: self(c) or other(c), (*self.reads, *other.reads), f"{self.text} or {other.text}")


@dataclass(frozen=True)
class PartRule:
    """A condition on a model part's setting that depends on which part holds it (`unet.train`
    counts, `vae.train` does not): `at(part)` is the Rule for that part's setting. `text` names the
    part as `{part}`."""

    test: Callable[[Config, str], Any]
    reads: tuple[str, ...]
    text: str

    def at(self, part: str) -> Rule:
        return Rule(lambda c: self.test(c, part), self.reads, self.text.format(part=part))


def _value(name: str, default: str | None) -> Callable[[Config], Any]:
    """The field's value; with `default`, as text, a blank value counting as `default`."""
    if default is None:
        return lambda c: c.get(name)
    return lambda c: str(c.get(name) or default)


def on(name: str) -> Rule:
    return Rule(lambda c: bool(c.get(name)), (name,), f"{name} is on")


def off(name: str) -> Rule:
    return Rule(lambda c: not c.get(name), (name,), f"{name} is off")


def is_(name: str, *values: str, default: str | None = None) -> Rule:
    get = _value(name, default)
    return Rule(lambda c: get(c) in values, (name,), f"{name} is {' or '.join(values)}")


def is_not(name: str, *values: str, default: str | None = None) -> Rule:
    get = _value(name, default)
    return Rule(lambda c: get(c) not in values, (name,), f"{name} is not {' or '.join(values)}")


def blank(name: str) -> Rule:
    """The text field is empty (a missing one too)."""
    return Rule(lambda c: not str(c.get(name) or "").strip(), (name,), f"{name} is blank")


def _nonzero(value: Any) -> bool:
    """A blank or unreadable number counts as set: the field it governs stays in view."""
    try:
        return float(value) != 0
    except (TypeError, ValueError):
        return True


def nonzero(name: str) -> Rule:
    return Rule(lambda c: _nonzero(c.get(name)), (name,), f"{name} is not 0")


def family_rule(says: Callable[[Any], Any], what: str) -> Rule:
    """A rule on the model type's description (config/family_info): true where `says(info)` is;
    an unknown or unset model type shows the field."""

    def test(config: Config) -> bool:
        model_type = config.get("model_type")
        info = family_info(model_type) if model_type else None
        return info is None or bool(says(info))

    return Rule(test, ("model_type",), what)


# the DDPM noise schedule's options: a flow-matching family (SD 3, Flux, Qwen-Image...) has none of them
DDPM_SCHEDULE = Rule(lambda c: not is_flow_matching(c.get("model_type") or ""), ("model_type",), "the model type uses a DDPM noise schedule")
# dynamic_timestep_shifting: the flow-matching families' resolution shift (a DDPM schedule has none)
FLOW_SCHEDULE = Rule(lambda c: is_flow_matching(c.get("model_type") or ""), ("model_type",), "the model type uses a flow-matching schedule")
# the frame sampling options: only a video family reads clips (Wan)
TAKES_VIDEO = family_rule(lambda info: info.frame_step is not None, "the model type trains on video clips")
# text_encoder_sequence_length: the families whose T5 / language-model encoder reads a window of it
READS_TOKEN_WINDOW = family_rule(lambda info: info.token_window is not None, "the model type's text encoder reads that token window")
# text_encoder_max_token_length: the families that read captions with CLIP alone (SD 1.x/2.x, SDXL: the UNet families)
CLIP_CAPTIONS = family_rule(lambda info: info.denoiser == "unet", "the model type reads captions with CLIP alone")
# circular padding: the UNet families and Würstchen / Stable Cascade (their convolutions, as OneTrainer)
PADS_CIRCULARLY = family_rule(lambda info: info.circular_padding, "the model type's convolutions can pad circularly")
# transformer.attention_mask: the families whose padding tokens' prompt embeddings OneTrainer zeroes (Flux.1, SD 3, HiDream)
READS_TEXT_ENCODER_FILES = family_rule(lambda info: info.text_encoder_files, "the model type reads text encoder files")
ZEROES_PADDING = family_rule(lambda info: info.zeroes_padding, "the model type can zero the prompt embeddings of padding tokens")
# <part>.include: the parts OneTrainer's switch may leave out (the text encoders of SD 3, Flux.1, HiDream and
# HunyuanVideo, Ideogram 4's unconditional transformer), bound to the part that holds it
INCLUDABLE_PART = PartRule(lambda c, part: family_rule(lambda info: part in info.includable, "")(c),
                           ("model_type",), "the model type can leave {part} out")
# only a family whose denoiser learns its variance trains it (PixArt)
LEARNS_VARIANCE = family_rule(lambda info: info.learns_variance, "the model type's denoiser learns its variance")
# an image-editing family trains on (image, control image) pairs (Qwen-Image-Edit)
EDITS_IMAGES = family_rule(lambda info: info.control_image, "the model type trains on (image, control image) pairs")
# an inpainting family takes a conditioning image beside the noisy latents (SD 1.5/2.0/SDXL inpainting, Flux Fill)
INPAINTS = family_rule(lambda info: info.inpainting, "the model type is an inpainting model")
# `backup_must_match` of a LoRA's structure (which parts and layers get adapters, of what kind and
# shape): a backup's trained adapters fit only the same structure, and only the LORA method has one
LORA_METHOD = is_("training_method", "LORA", default="FINE_TUNE")
# a part's LoRA layers: only the parts the model type's LoRA attaches them to (its denoiser and
# text encoders, never the VAE, nor a section the model type does not have)
LORA_PART = PartRule(lambda c, part: LORA_METHOD(c) and part in trainable_parts(str(c.get("model_type") or "")),
                     ("training_method", "model_type"), "training_method is LORA and the model type's LoRA trains {part}")
