"""OneTrainer's part switch `include` before a run: a text encoder left out cannot train, the
settings of a part left out do nothing (the page hides them, the doctor names a set one), and the
switch on a model type (or part) that has no such choice is said to be ignored. Which parts may be
left out is the family's description (FamilyInfo.includable); the model families act on it
(models/excluded_parts.py for text encoders, models/ideogram4.py for Ideogram 4's unconditional
transformer)."""

from __future__ import annotations

from functools import cache
from typing import Any

from .enums import TrainingMethod
from .families import FAMILIES, family_info, includable_parts
from .fields import PLANNED, iter_fields
from .schema import TrainConfig

# a left-out part's settings that still mean something: the switch itself, and Train (refused while on: include_problems)
STILL_READ = ("include", "train")
# the methods that train a part whose `train` is on (EMBEDDING trains vectors, FINE_TUNE_VAE the VAE)
TRAINS_PARTS = (TrainingMethod.LORA, TrainingMethod.FINE_TUNE)
UNCONDITIONAL = "unconditional_transformer"  # Ideogram 4's frozen one: the includable part that is no text encoder


def offering_families() -> str:
    """What offers the switch, for messages ("the text encoders of SD 3, SD 3.5, Flux.1, ... and the
    unconditional_transformer of Ideogram 4")."""
    def names(which) -> str:
        return ", ".join(dict.fromkeys(info.name or model_type.value for model_type, info in FAMILIES.items()
                                       if any(which(p) for p in info.includable)))

    return f"the text encoders of {names(lambda p: p.startswith('text_encoder'))} and the {UNCONDITIONAL} of {names(lambda p: p == UNCONDITIONAL)}"


def excluded_parts(config: Any) -> tuple[str, ...]:
    """The parts this run leaves out: those of the model type's includable parts whose include is off."""
    return tuple(part for part in includable_parts(config.model_type) if not getattr(config, part).include)


def is_left_out(config: dict[str, Any], part: str) -> bool:
    """`excluded_parts` on the config as the page holds it (a dict; a missing Include counts as on)."""
    return part in includable_parts(str(config.get("model_type") or "")) and (config.get(part) or {}).get("include", True) is False


@cache
def left_out_settings(part: str) -> dict[str, Any]:
    """The settings that do nothing while `part` is left out of the run (it is not loaded), with
    their defaults: those of its section the trainer reads but Include and Train, and its clip skip
    (`<part>_layer_skip`). The page hides them then; the doctor says a set one is ignored. Empty for
    a part no model type leaves out."""
    if not any(part in info.includable for info in FAMILIES.values()):
        return {}
    return {f.path: f.default for f in iter_fields(TrainConfig)
            if (f.path.partition(".")[0] == part and "." in f.path and f.path.partition(".")[2] not in STILL_READ
                or f.path == f"{part}_layer_skip") and f.status != PLANNED and not f.compat}


def include_problems(config: Any) -> list[str]:
    """A part left out with Train on: it is not loaded, so there is nothing to train (OneTrainer
    fails on it mid-setup); refused before the run, naming both fields."""
    if TrainingMethod(config.training_method) not in TRAINS_PARTS:
        return []
    return [f"{part}.include: {part} is left out of the run (not loaded), so it cannot train; turn {part}.train off, "
            f"or {part}.include on." for part in excluded_parts(config) if getattr(config, part).train]


def include_warnings(config: Any) -> list[str]:
    """A left-out part's settings that were set (`_unread_settings`); `include: false` on a part the
    model type always loads: ignored, said once; and a fine-tune with a part left out, whose saved
    model lacks it (Ideogram 4's unconditional transformer too: its saved diffusers folder has none)."""
    info = family_info(config.model_type)
    if info is None:
        return []
    left_out = excluded_parts(config)
    said = _unread_settings(config, left_out) + _saved_without(config, left_out)
    off = [p for p in info.parts if p not in info.includable and not getattr(getattr(config, p), "include", True)]
    if not off:
        return said
    where = (f"{config.model_type.value} leaves out only {', '.join(info.includable)}" if info.includable
             else f"{config.model_type.value} loads every part")
    return said + [f"{', '.join(p + '.include' for p in off)}: not applicable, ignored: {where} (OneTrainer offers Include for "
                   f"{offering_families()} only)."]


def _value(config: Any, path: str) -> Any:
    head, _, name = path.partition(".")
    value = getattr(getattr(config, head), name) if name else getattr(config, head)
    return getattr(value, "value", value)


def _unread_settings(config: Any, left_out: tuple[str, ...]) -> list[str]:
    """A left-out part's settings set away from their defaults (a weight type, a file, a learning
    rate): ignored, said once per part; not refused, so OneTrainer's configs import unchanged."""
    out = []
    for part in left_out:
        changed = [f"{path} {_value(config, path)}" for path, default in left_out_settings(part).items()
                   if _value(config, path) != getattr(default, "value", default)]
        if changed:
            out.append(f"{', '.join(changed)}: ignored: {part} is left out of the run ({part}.include off), so it is not "
                       f"loaded and {'this setting does' if len(changed) == 1 else 'these settings do'} nothing in this run; "
                       f"{'it is' if len(changed) == 1 else 'they are'} kept for when {part}.include is on again (nothing to do).")
    return out


def _saved_without(config: Any, left_out: tuple[str, ...]) -> list[str]:
    return ([f"{', '.join(left_out)} left out (Include off): the fine-tuned model is saved without {'it' if len(left_out) == 1 else 'them'}; "
             f"copy {'it' if len(left_out) == 1 else 'them'} from the base model to use the saved model in a pipeline."]
            if left_out and TrainingMethod(config.training_method) == TrainingMethod.FINE_TUNE else [])
