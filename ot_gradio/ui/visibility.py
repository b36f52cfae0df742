"""Which fields the page shows for the chosen model type and training method, read from the
families table (config/families.py) and the schema (a field's `applies_when` and `first`); no
gradio, no torch.

OneTrainer shows only the parts of the selected model, the LoRA tab only for LoRA and the
embedding tab only for embeddings. Fields marked planned are never shown (form.py), so these
rules only decide among the fields that work; they hold unchanged as more fields become "ok".
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from ..config.catalogue import offered_values
from ..config.enums import GGUF_TYPES, AttentionMechanism, DataType
from ..config.enums import TrainingMethod as T
from ..config.families import FAMILIES, FROZEN_PARTS, IMPLEMENTED_METHODS, family_info
from ..config.fields import field_meta, iter_fields, strip_optional
from ..config.include_parts import is_left_out, left_out_settings
from ..config.parts import ModelPartConfig
from ..config.schema import TrainConfig

# Tabs that belong to one training method (the others are shown for every method).
TAB_METHODS: dict[str, tuple[T, ...]] = {"lora": (T.LORA,), "embedding": (T.EMBEDDING,)}
def method_tabs_js() -> str:
    """Browser code run on each change of the training method: the buttons of the tabs that belong
    to one method (TAB_METHODS) shown for it and hidden for the others."""
    import json

    tabs = {tab: [m.value for m in methods] for tab, methods in TAB_METHODS.items()}
    return ("(method) => { const tabs = " + json.dumps(tabs) + "; for (const [tab, methods] of Object.entries(tabs)) {"
            " const b = document.getElementById(`tab-${tab}-button`);"
            " if (b) b.style.display = methods.includes(method) ? '' : 'none'; } return []; }")


# FINE_TUNE_VAE trains the VAE's decoder alone (training/vae_method.py): it reads these settings of
# the VAE and none of the other parts' training settings (PART_TRAINING)
VAE_TRAINING = ("learning_rate", "stop_training_after", "stop_training_after_unit")
PART_TRAINING = ("train", "learning_rate", "stop_training_after", "stop_training_after_unit", "dropout_probability",
                 "train_embedding", "gradient_checkpointing", "offload_fraction", "activation_offloading")
# ...and these options, which its step never reads: it encodes the images at every step (no latent
# cache, so nothing for only_cache) and draws no timesteps nor noise, so no timestep loss weight
# either. The noise schedule's
# options (zero terminal SNR, forced prediction) stay: a sample from a text prompt runs with them.
VAE_IGNORED = ("latent_caching", "offset_noise_weight", "generalized_offset_noise", "perturbation_noise_weight",
               "multires_noise_iterations", "multires_noise_discount", "offset_noise_random_strength", "adaptive_noise_scale",
               "perturbation_noise_random_strength",
               "min_noising_strength", "max_noising_strength", "timestep_distribution", "noising_weight", "noising_bias",
               "timestep_shift", "dynamic_timestep_shifting", "loss_weight_fn", "loss_weight_strength", "vb_loss_strength",
               "only_cache")
# said in a part's group while its Include is off, where its other settings were
LEFT_OUT_NOTE = "*Left out of the run (Include off): this part is not loaded, so its other settings do nothing and are hidden.*"


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
    """The parts of the chosen family, and its frozen modules with a section of their own (Ideogram
    4's unconditional transformer); every part for a model type the table does not know."""
    info = family_info(model_type) if model_type else None
    return info.parts + tuple(n for n in info.extra_params if n in model_parts()) if info else model_parts()


@cache
def includable_anywhere() -> frozenset[str]:
    """The parts some model type may leave out (its description's `includable`)."""
    return frozenset(part for info in FAMILIES.values() for part in info.includable)


def part_field_shown(path: str) -> bool:
    """Whatever the model: a frozen part shows only how it is loaded; caption dropout and
    embedding training only on text encoders (the part settings' schema lines say which);
    Include only on a part some model type may leave out (its rule says for which model type)."""
    part = part_of(path)
    if part is None or "." not in path:
        return True
    if path.split(".", 1)[1] == "include":
        return part in includable_anywhere()
    meta = field_meta(ModelPartConfig, path.split(".", 1)[1])  # the schema's on_frozen_part, text_encoder_only
    if part in FROZEN_PARTS:
        return bool(meta.get("on_frozen_part")) or (part == "vae" and path.split(".", 1)[1] in VAE_TRAINING)
    if meta.get("text_encoder_only"):
        return "text_encoder" in part
    return True


def offered_methods(model_type: str | None) -> tuple[str, ...]:
    """The training methods the model type offers: its family's that the trainer implements, in
    the family's order (LoRA first); every one for a model type the table does not know."""
    info = family_info(model_type) if model_type else None
    return tuple(m.value for m in (info.methods if info else tuple(T)) if m in IMPLEMENTED_METHODS)


def with_current(offered: list[str], current: str | None) -> list[str]:
    """A dropdown's choices: the offered ones, and the current value when they lack it (a loaded
    config keeps it on screen, refused by the start check; gradio refuses a value outside the choices)."""
    return offered + [current] if current and current not in offered else offered


def method_choices(model_type: str | None, method: str | None) -> list[str]:
    """The training method dropdown's choices: the offered methods, and the current one when the
    type lacks it (a loaded config keeps it on screen, refused by the start check)."""
    offered = list(offered_methods(model_type))
    return with_current(offered, method)


def transformer_weight_dtype_choices(model_type: str | None, current: str | None) -> list[str]:
    """The transformer's weight type dropdown: the GGUF types only for a family that reads .gguf
    transformer files, and the current value when the type lacks it (kept on screen, refused by the start check)."""
    info = family_info(model_type) if model_type else None
    offered = offered_values(DataType) + ([t.value for t in GGUF_TYPES] if info is not None and info.gguf else [])
    return with_current(offered, current)


def attention_choices(model_type: str | None, current: str | None) -> list[str]:
    """The attention dropdown: the mechanisms that reach the model type's attention (its
    description's `attention`; every one for a type the table does not know), and the current
    value when the type lacks it (kept on screen, refused by the start check)."""
    info = family_info(model_type) if model_type else None
    offered = list(info.attention) if info is not None else offered_values(AttentionMechanism)
    return with_current(offered, current)


def method_after_type_change(model_type: str | None, method: str | None) -> str | None:
    """The method to switch to when the model type changed to one without `method` (the first
    offered one, LoRA where there is one); None when it keeps it."""
    offered = offered_methods(model_type)
    if not offered or method in offered:
        return None
    return T.LORA.value if T.LORA.value in offered else offered[0]


def method_field_shown(path: str, method: str | None) -> bool:
    """The settings that depend on the training method: under FINE_TUNE_VAE the VAE's training
    settings and none of the other parts', nor the options its step ignores (VAE_IGNORED); under
    any other method not the VAE's."""
    if path in VAE_IGNORED:
        return method != T.FINE_TUNE_VAE.value
    part, dot, name = path.partition(".")
    if not dot or part not in model_parts():
        return True
    vae_method = method == T.FINE_TUNE_VAE.value
    if part == "vae" and name in VAE_TRAINING:
        return vae_method
    return not (vae_method and part != "vae" and name in PART_TRAINING)


@cache
def method_fields() -> tuple[str, ...]:
    """The fields `method_field_shown` may hide (the page updates them when the method changes)."""
    return tuple(f.path for f in iter_fields(TrainConfig) if f.path in VAE_IGNORED or part_field_shown(f.path) and (
        f.path.partition(".")[2] in PART_TRAINING and part_of(f.path) is not None and "." in f.path))


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
    return tab_shown(tab, method) and method_field_shown(path, method)


@cache
def _rules() -> dict[str, Callable[[dict], Any]]:
    return {f.path: f.applies_when for f in iter_fields(TrainConfig) if f.applies_when is not None}


@cache
def _first() -> dict[str, int]:
    return {f.path: f.first for f in iter_fields(TrainConfig) if f.first}


def conditional_fields() -> tuple[str, ...]:
    """Fields that apply only under a setting of another field (the schema's `applies_when`):
    shown only then, on every edit."""
    return tuple(_rules())


def applies(path: str, config: dict) -> bool:
    """Whether a field means anything with the rest of `config` as it is."""
    rule = _rules().get(path)
    return True if rule is None else rule(config)


def included(path: str, config: dict) -> bool:
    """False for a setting of a part the run leaves out (its Include off): the part is not loaded,
    so the setting does nothing (config/include_parts.left_out_settings says which)."""
    part = part_of(path)
    return part is None or path not in left_out_settings(part) or not is_left_out(config, part)


@cache
def left_out_fields() -> tuple[str, ...]:
    """The fields `included` may hide (the page updates them on every edit)."""
    return tuple(path for part in model_parts() for path in left_out_settings(part))


def shown_now(path: str, config: dict) -> bool:
    """The rules that follow the rest of the config, together: the field's own condition, the
    training method's, and its part being included in the run."""
    return applies(path, config) and method_field_shown(path, config.get("training_method")) and included(path, config)


def tab_order(paths: list[str]) -> list[str]:
    """`paths` of one tab as the page shows them: the fields with `first=n` first, in that order
    (the LoRA tab opens with the adapter type, rank and alpha, not with dropout), then the rest in
    schema order."""
    ranks = _first()
    first = sorted((p for p in paths if p in ranks), key=ranks.__getitem__)
    return first + [p for p in paths if p not in ranks]
