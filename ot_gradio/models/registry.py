"""ModelType -> model family class.

A family module registers itself with `@register_family(ModelType.X, ...)`. Every module of this
package is imported on the first lookup, so adding a family is adding one file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TypeVar

from ot_gradio.config.enums import ModelType

T = TypeVar("T", bound=type)

_FAMILIES: dict[ModelType, type] = {}
_discovered = False


class UnsupportedModelTypeError(ValueError):
    pass


def register_family(*model_types: ModelType | str) -> Callable[[T], T]:
    """Class decorator: the family class handles these model types."""

    def decorate(cls: T) -> T:
        for model_type in model_types:
            model_type = ModelType(model_type)
            if _FAMILIES.get(model_type, cls) is not cls:
                raise ValueError(f"{model_type} is already handled by {_FAMILIES[model_type].__name__}.")
            _FAMILIES[model_type] = cls
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
