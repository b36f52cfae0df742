"""ModelType -> model family class.

A family module registers itself with `@register_family(ModelType.X, ...)`. Every module of this
package is imported on the first lookup, so adding a family is adding one file (and its
torch-free description, config/family_info/<family>.py). Registering gives the class the facts of
its description (DESCRIBED, DESCRIBED_IF_GIVEN), which the class therefore does not declare itself.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TypeVar

from ot_gradio.config.enums import ModelType
from ot_gradio.config.families import family_info

T = TypeVar("T", bound=type)

_FAMILIES: dict[ModelType, type] = {}
_discovered = False


class UnsupportedModelTypeError(ValueError):
    pass


# class attribute -> the description's field it is read from
DESCRIBED = {"part_names": "parts", "denoiser": "denoiser", "text_encoder_names": "text_encoders",
             "bucket_step": "bucket_step", "schedule_kind": "schedule", "inpainting": "inpainting", "frame_step": "frame_step",
             "transformer_file": "transformer_file", "gguf_transformer": "gguf", "text_encoder_files": "text_encoder_files",
             "control_image": "control_image", "depth_maps": "depth_maps", "image_to_video": "image_to_video", "text_encoder_labels": "text_encoder_labels"}
# class attribute -> the description's field it is read from where the description gives it (not
# ""); where it does not, the class states it itself or keeps its base class's (SD 2's computed version)
DESCRIBED_IF_GIVEN = {"family_name": "name", "default_config_repo": "hub_repo", "lora_base_model_version": "lora_version"}


def _facts(info) -> tuple[tuple[str, object], ...]:
    """The class attributes a description gives: every DESCRIBED one, and the DESCRIBED_IF_GIVEN ones it fills."""
    given = tuple((attr, getattr(info, field)) for attr, field in DESCRIBED_IF_GIVEN.items() if getattr(info, field))
    return tuple((attr, getattr(info, field)) for attr, field in DESCRIBED.items()) + given


def _describe(cls: type, model_types: tuple[ModelType, ...]) -> None:
    """Sets the attributes of `cls` that the description of its model types gives (_facts); a class
    that declares one itself, or model types described differently, is an error."""
    infos = {model_type: family_info(model_type) for model_type in model_types}
    missing = [m.value for m, info in infos.items() if info is None]
    if missing:
        raise ValueError(f"{', '.join(missing)} has no description in config/family_info; add one before registering {cls.__name__}.")
    facts = {_facts(info) for info in infos.values()}
    if len(facts) > 1:
        raise ValueError(f"{cls.__name__} handles model types described differently ({', '.join(m.value for m in infos)}).")
    given = facts.pop()
    own = sorted({attr for attr, _ in given} & set(vars(cls)))
    if own:
        raise ValueError(f"{cls.__name__} declares {', '.join(own)}: these come from its description in config/family_info.")
    for attr, value in given:
        setattr(cls, attr, value)


def register_family(*model_types: ModelType | str) -> Callable[[T], T]:
    """Class decorator: the family class handles these model types, with the facts their
    description gives (DESCRIBED); a class registered for one model type gets it as its `model_type`."""

    def decorate(cls: T) -> T:
        types = tuple(ModelType(m) for m in model_types)
        for model_type in types:
            if _FAMILIES.get(model_type, cls) is not cls:
                raise ValueError(f"{model_type} is already handled by {_FAMILIES[model_type].__name__}.")
        _describe(cls, types)
        if len(types) == 1:
            cls.model_type = types[0]
        _FAMILIES.update(dict.fromkeys(types, cls))
        return cls

    return decorate


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    package = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__package__}.{info.name}")
    _discovered = True


def supported_model_types() -> list[ModelType]:
    _discover()
    return [t for t in ModelType if t in _FAMILIES]


def get_family(model_type: ModelType | str) -> type:
    """The family class for a model type, or an error naming the supported ones."""
    _discover()
    try:
        key = ModelType(model_type)
    except ValueError:
        key = None
    if key not in _FAMILIES:
        supported = ", ".join(t.value for t in supported_model_types())
        raise UnsupportedModelTypeError(f"Model type '{model_type}' is not supported yet. Supported: {supported}.")
    return _FAMILIES[key]
