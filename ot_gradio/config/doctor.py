"""Warnings before a run: settings that are valid but will not do what the user expects."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from .enums import LORA_FORMATS, ModelFormat, ModelType, TrainingMethod, native_resolution
from .fields import PLANNED, field_meta, nested_section
from .optimizer import OptimizerConfig, optimizer_param_defaults
from .schema import TrainConfig
from .validation import join_path

SUPPORTED_MODEL_TYPES = (ModelType.STABLE_DIFFUSION_15,)
SUPPORTED_METHODS = (TrainingMethod.LORA,)


def planned_changes(config: BaseModel, default: BaseModel | None = None, prefix: str = "", planned: bool = False) -> list[str]:
    """Paths of options the trainer does not act on yet (PLANNED, or inside a PLANNED group) whose
    value differs from the default. Defaults of nested groups are the parent's defaults; an
    optimizer parameter also counts as unchanged at that optimizer's own default."""
    default = default if default is not None else type(config)()
    own = optimizer_param_defaults(config.optimizer) if isinstance(config, OptimizerConfig) else {}
    out: list[str] = []
    for name, info in type(config).model_fields.items():
        meta = field_meta(type(config), name)
        if meta.get("compat"):
            continue
        is_planned = planned or meta.get("status") == PLANNED
        path = join_path(prefix, name)
        value, default_value = getattr(config, name), getattr(default, name)
        kind, cls = nested_section(info.annotation)
        if kind == "section" and isinstance(value, BaseModel):
            out += planned_changes(value, default_value, path, is_planned)
        elif kind == "list" and not is_planned:
            for i, item in enumerate(value or []):
                out += planned_changes(item, cls(), join_path(path, i))
        elif is_planned and isinstance(value, dict) and isinstance(default_value, dict) and default_value:
            out += [join_path(path, k) for k in default_value if k in value and _differs(value[k], default_value[k])]
        elif is_planned and _differs(value, default_value) and (name not in own or _differs(value, own[name])):
            out.append(path)
    return out


def _differs(value: Any, default: Any) -> bool:
    return value != default and str(value) != str(default)


def check(config: TrainConfig, *, available_optimizers: Iterable[Any] | None = None, include_planned: bool = True) -> list[str]:
    """Everything worth telling the user before they start this config, most important first.

    ``available_optimizers``: the optimizers the trainer implements (its registry's keys), when
    the caller may import the trainer; the config package cannot. ``include_planned=False``
    leaves out the list of unsupported options (a OneTrainer import already warned about them)."""
    warnings: list[str] = []
    method, model_type = config.training_method, config.model_type
    if model_type not in SUPPORTED_MODEL_TYPES:
        warnings.append(f"Model type {model_type.value} is not supported by the trainer yet (only {', '.join(m.value for m in SUPPORTED_MODEL_TYPES)} for now).")
    if method not in SUPPORTED_METHODS:
        warnings.append(f"Training method {method.value} is not supported by the trainer yet (only {', '.join(m.value for m in SUPPORTED_METHODS)} for now).")
    if available_optimizers is not None:
        names = [str(getattr(o, "value", o)) for o in available_optimizers]
        if config.optimizer.optimizer.value not in names:
            warnings.append(f"Optimizer {config.optimizer.optimizer.value} is not available in the trainer yet: use one of {', '.join(names)}.")

    if not config.concepts:
        warnings.append("There are no concepts: add at least one concept (a folder of training images) on the Concepts tab.")
    elif not any(c.enabled for c in config.concepts):
        warnings.append("Every concept is disabled: enable at least one concept to train on.")

    fmt = config.output_model_format
    if method == TrainingMethod.LORA and fmt not in LORA_FORMATS:
        warnings.append(f"LoRA training with output format {fmt.value}, which is a whole-model format: use KOHYA_LORA (A1111, ComfyUI, Forge, diffusers) or SAFETENSORS (diffusers/PEFT keys).")
    elif method in (TrainingMethod.FINE_TUNE, TrainingMethod.FINE_TUNE_VAE) and fmt in LORA_FORMATS - {ModelFormat.SAFETENSORS}:
        warnings.append(f"Fine-tuning with output format {fmt.value}, which holds LoRA weights: use SAFETENSORS, ORIGINAL_SINGLE_FILE or DIFFUSERS.")

    samples = [(i, s) for i, s in enumerate(config.samples) if s.enabled]
    placeholder = config.embedding.placeholder
    if method == TrainingMethod.EMBEDDING and placeholder:
        lacking = [str(i + 1) for i, s in samples if placeholder not in s.prompt]
        if lacking:
            which = "Sample prompt" + ("s " if len(lacking) > 1 else " ") + ", ".join(lacking)
            warnings.append(f"{which} lack{'' if len(lacking) > 1 else 's'} {placeholder}: without it the samples never use the embedding and all look the same, the commonest cause of useless embedding samples. Put {placeholder} where the trained token goes, e.g. 'a photo of {placeholder}'.")

    if not config.base_model_name.startswith("tiny:"):
        native = native_resolution(model_type)
        off = [f"{i + 1} ({s.width}x{s.height})" for i, s in samples if not 0.5 <= (s.width * s.height) / (native * native) <= 2.0]
        if off:
            warnings.append(f"Sample size far from {model_type.value}'s native resolution {native}x{native} for sample {', '.join(off)}: such samples come out as noise or broken images even when training goes well.")

    changed = planned_changes(config) if include_planned else []
    if changed:
        warnings.append("These options are set but the trainer does not support them yet, so they will be ignored: " + ", ".join(changed) + ".")
    return warnings
