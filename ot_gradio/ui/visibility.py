"""Which fields the page shows for the chosen model type and training method, read from the
families table (config/families.py) and the schema; no gradio, no torch.

OneTrainer shows only the parts of the selected model, the LoRA tab only for LoRA and the
embedding tab only for embeddings. Fields marked planned are never shown (form.py), so these
rules only decide among the fields that work; they hold unchanged as more fields become "ok".
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from ..config.enums import TrainingMethod as T
from ..config.families import FROZEN_PARTS, family_info, is_flow_matching
from ..config.fields import iter_fields, strip_optional
from ..config.parts import ModelPartConfig
from ..config.schema import TrainConfig

# Tabs that belong to one training method (the others are shown for every method).
TAB_METHODS: dict[str, tuple[T, ...]] = {"lora": (T.LORA,), "embedding": (T.EMBEDDING,)}
# Settings of a frozen part (VAE, VQGAN, ...) worth showing: it only loads and encodes.
FROZEN_PART_FIELDS = ("weight_dtype", "model_name")
# Part settings that only mean something for a text encoder.
TEXT_ENCODER_FIELDS = ("dropout_probability", "train_embedding")


@cache
def model_parts() -> tuple[str, ...]:
    """Every model part section of the config, in schema order (denoisers first)."""
    return tuple(f.path for f in iter_fields(TrainConfig)
                 if "." not in f.path and "[]" not in f.path and isinstance(strip_optional(f.type), type)
                 and issubclass(strip_optional(f.type), ModelPartConfig))


def part_of(path: str) -> str | None:
    """The model part a field belongs to: `text_encoder.learning_rate` and also the top-level
    `text_encoder_2_layer_skip` (the longest part name its name starts with)."""
    head, dot, _ = path.partition(".")
    if dot:
        return head if head in model_parts() else None
    matches = [p for p in model_parts() if path.startswith(p + "_")]
    return max(matches, key=len) if matches else None


def shown_parts(model_type: str | None) -> tuple[str, ...]:
    """The parts of the chosen family; every part for a model type the table does not know."""
    info = family_info(model_type) if model_type else None
    return info.parts if info else model_parts()


def part_field_shown(path: str) -> bool:
    """Whatever the model: a frozen part shows only how it is loaded; caption dropout and
    embedding training only on text encoders."""
    part = part_of(path)
    if part is None or "." not in path:
        return True
    name = path.split(".", 1)[1]
    if part in FROZEN_PARTS:
        return name in FROZEN_PART_FIELDS
    if name in TEXT_ENCODER_FIELDS:
        return "text_encoder" in part
    return True


def tab_shown(tab: str | None, method: str | None) -> bool:
    methods = TAB_METHODS.get(tab or "")
    if methods is None:
        return True
    try:
        return T(method) in methods
    except ValueError:
        return False


def field_shown(path: str, tab: str | None, model_type: str | None, method: str | None) -> bool:
    """The whole rule for one field (planned fields aside)."""
    part = part_of(path)
    if part is not None and (part not in shown_parts(model_type) or not part_field_shown(path)):
        return False
    return tab_shown(tab, method)


# Fields that apply only under a setting of another field: shown only then (on every edit).
def _multi_gpu(c: dict) -> bool:
    return bool(c.get("multi_gpu"))


def _peft(c: dict) -> str:
    return str(c.get("peft_type") or "LORA")


APPLIES_WHEN: dict[str, Callable[[dict], bool]] = {
    "device_indexes": _multi_gpu,
    "gradient_reduce_precision": _multi_gpu,
    "fused_gradient_reduce": _multi_gpu,
    "async_gradient_reduce_buffer": lambda c: _multi_gpu(c) and bool(c.get("fused_gradient_reduce")),
    "custom_learning_rate_scheduler": lambda c: c.get("learning_rate_scheduler") == "CUSTOM",
    "scheduler_params": lambda c: c.get("learning_rate_scheduler") == "CUSTOM",
    # cycles shape only the restarting cosines; a constant rate never decays to a minimum
    "learning_rate_cycles": lambda c: c.get("learning_rate_scheduler") in ("COSINE_WITH_RESTARTS", "COSINE_WITH_HARD_RESTARTS"),
    "learning_rate_min_factor": lambda c: c.get("learning_rate_scheduler") != "CONSTANT",
    "lora_rank": lambda c: _peft(c) != "LOKR",  # LoKr uses its dimension instead
    "lora_decompose": lambda c: _peft(c) == "LORA",  # DoRA
    "lora_decompose_norm_epsilon": lambda c: _peft(c) == "LORA" and bool(c.get("lora_decompose")),
    "lora_decompose_output_axis": lambda c: _peft(c) == "LORA" and bool(c.get("lora_decompose")),
    "lokr_dim": lambda c: _peft(c) == "LOKR",
    "lokr_decompose_both": lambda c: _peft(c) == "LOKR",
    "lokr_decompose_factor": lambda c: _peft(c) == "LOKR",
    "lokr_use_tucker": lambda c: _peft(c) == "LOKR",
    # settings of a feature that is off (the trainer reads them only when it is on)
    "ema_decay": lambda c: str(c.get("ema") or "OFF") != "OFF",
    "ema_update_step_interval": lambda c: str(c.get("ema") or "OFF") != "OFF",
    "huber_delta": lambda c: _nonzero(c.get("huber_strength")),
    "loss_weight_strength": lambda c: c.get("loss_weight_fn") in ("MIN_SNR_GAMMA", "P2"),  # their gamma
    "generalized_offset_noise": lambda c: _nonzero(c.get("offset_noise_weight")),
    "unmasked_probability": lambda c: bool(c.get("masked_training")),
    "unmasked_weight": lambda c: bool(c.get("masked_training")),
    "normalize_masked_area_loss": lambda c: bool(c.get("masked_training")),
    # the DDPM noise schedule's options; a flow-matching family (SD 3, Flux, Qwen-Image...) has none of them
    "rescale_noise_scheduler_to_zero_terminal_snr": lambda c: not is_flow_matching(c.get("model_type") or ""),
    "force_v_prediction": lambda c: not is_flow_matching(c.get("model_type") or ""),
    "force_epsilon_prediction": lambda c: not is_flow_matching(c.get("model_type") or ""),
    "vb_loss_strength": lambda c: _learns_variance(c.get("model_type")),
}


def _learns_variance(model_type) -> bool:
    """Only a family whose denoiser learns its variance trains it (PixArt); an unknown type shows it."""
    info = family_info(model_type) if model_type else None
    return info is None or info.learns_variance


def _nonzero(value) -> bool:  # a blank or unreadable number counts as set (the field stays in view)
    try:
        return float(value) != 0
    except (TypeError, ValueError):
        return True

# Fields a tab shows first, in this order (the rest follow in schema order): the LoRA tab opens
# with the adapter type, rank and alpha, not with dropout and the layer filter.
TAB_FIRST: dict[str, tuple[str, ...]] = {
    "lora": ("peft_type", "lora_rank", "lora_alpha", "lokr_dim", "lora_decompose", "lora_decompose_norm_epsilon",
             "lora_decompose_output_axis"),
}


def applies(path: str, config: dict) -> bool:
    """Whether a field means anything with the rest of `config` as it is."""
    rule = APPLIES_WHEN.get(path)
    return True if rule is None else rule(config)


def tab_order(tab: str, paths: list[str]) -> list[str]:
    first = [p for p in TAB_FIRST.get(tab, ()) if p in paths]
    return first + [p for p in paths if p not in first]
