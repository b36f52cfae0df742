"""Turning a dict into a TrainConfig: drop unknown keys (with their paths), validate, and explain
every invalid value as ``field.path: what is allowed`` instead of a pydantic dump."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from .catalogue import model_type_problem, unavailable
from .fields import enum_of, nested_section, strip_optional
from .schema import TrainConfig


class ConfigError(ValueError):
    """A config that cannot be used. ``errors`` holds one ``path: problem`` line per problem."""

    def __init__(self, errors: str | list[str]):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        if len(self.errors) == 1:
            message = self.errors[0]
        else:
            message = f"{len(self.errors)} problems in the config:\n" + "\n".join(f"  {e}" for e in self.errors)
        super().__init__(message)


@dataclass
class LoadResult:
    """A loaded config and what the user should know about how it was read."""

    config: TrainConfig
    warnings: list[str] = field(default_factory=list)


def import_result(config: TrainConfig, head: str, notes: list[str], left: list[str]) -> LoadResult:
    """An imported config with its one warning: how it was read (`head`), what is read differently
    (`notes`, each said once) and every other set value, left at this trainer's defaults."""
    text = head
    if notes:
        text += "; " + "; ".join(dict.fromkeys(notes))
    if left:
        text += "; set there but not carried over (left at this trainer's defaults): " + ", ".join(left)
    return LoadResult(config, [text + "."])


def join_path(prefix: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


def strip_unknown(data: dict[str, Any], model: type[BaseModel] = TrainConfig, prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """A copy of ``data`` without keys the schema does not know, and the full paths of those keys
    (``concepts[0].image.foo``). Values of the wrong shape are left for validation to report."""
    clean: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in data.items():
        path = join_path(prefix, key)
        info = model.model_fields.get(key)
        if info is None:
            unknown.append(path)
            continue
        kind, cls = nested_section(info.annotation)
        if kind == "section" and isinstance(value, dict):
            value, more = strip_unknown(value, cls, path)
            unknown += more
        elif kind == "list" and isinstance(value, list):
            items = []
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    item, more = strip_unknown(item, cls, join_path(path, i))
                    unknown += more
                items.append(item)
            value = items
        elif kind == "dict" and isinstance(value, dict):
            entries = {}
            for name, item in value.items():
                if isinstance(item, dict):
                    item, more = strip_unknown(item, cls, join_path(path, name))
                    unknown += more
                entries[name] = item
            value = entries
        clean[key] = value
    return clean, unknown


def unknown_keys_warning(paths: list[str]) -> str:
    return "Unknown options were ignored (not part of the config; check for typos): " + ", ".join(paths)


def validate(data: dict[str, Any], model: type[BaseModel] = TrainConfig) -> Any:
    """A TrainConfig naming a model type, training method or optimizer the trainer does not
    implement is refused here too, so loading or importing it fails naming the field."""
    try:
        config = model.model_validate(data)
    except ValidationError as err:
        untrained = model_type_problem(data.get("model_type")) if model is TrainConfig and isinstance(data, dict) else None
        raise ConfigError([untrained] if untrained else explain(err, model)) from None
    problems = unavailable(config) if model is TrainConfig else []
    if problems:
        raise ConfigError(problems)
    return config


def explain(err: ValidationError, model: type[BaseModel] = TrainConfig) -> list[str]:
    lines: list[str] = []
    for e in err.errors(include_url=False):
        path = _loc_path(e["loc"])
        lines.append(f"{path or '(config)'}: {_what_is_allowed(e, _annotation_at(model, e['loc']))}")
    return lines


def _loc_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path = join_path(path, part)
    return path


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The type annotation of the field an error points at, following sections, lists and dicts."""
    annotation: Any = model
    i = 0
    while i < len(loc):
        part = loc[i]
        current = strip_optional(annotation)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(part) if isinstance(part, str) else None
            if info is None:
                return None
            annotation = info.annotation
            i += 1
            continue
        kind, cls = nested_section(current)
        if kind in ("list", "dict"):
            annotation = cls
            i += 1
            continue
        return None
    return annotation


def _got(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**60:
        shown = f"a number of {len(str(abs(value)))} digits"  # repr would fill the screen
    else:
        shown = {None: "null", True: "true", False: "false"}.get(value, value) if isinstance(value, (bool, type(None))) else repr(value)
    if len(shown) > 120:
        shown = f"{shown[:100]}... ({len(shown)} characters)"
    return f" (got {shown})"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _what_is_allowed(e: dict[str, Any], annotation: Any) -> str:
    kind, ctx, value = e["type"], e.get("ctx") or {}, e.get("input")
    enum = enum_of(annotation)
    if kind == "enum" or (enum is not None and kind in ("string_type", "literal_error")):
        names = [m.value for m in enum] if enum else re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"must be one of {', '.join(names)}" + _got(value)
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        symbol, key = bounds[kind]
        return f"must be {symbol} {_number(ctx.get(key))}" + _got(value)
    simple = {
        "int_parsing": "must be a whole number", "int_type": "must be a whole number",
        "int_from_float": "must be a whole number", "float_parsing": "must be a number",
        "float_type": "must be a number", "bool_parsing": "must be true or false",
        "bool_type": "must be true or false", "string_type": "must be text",
        "list_type": "must be a list", "dict_type": "must be an object ({...})",
        "model_type": "must be an object ({...}) of settings", "model_attributes_type": "must be an object ({...}) of settings",
        "missing": "is required", "extra_forbidden": "is not a known option",
        "finite_number": "must be a finite number",
    }
    if kind in simple:
        return simple[kind] + ("" if kind in ("missing", "extra_forbidden") else _got(value))
    if kind == "value_error":
        message = str(ctx.get("error", e.get("msg", "")))
        return message.removeprefix("Value error, ") + ("" if repr(value) in message else _got(value))
    message = str(e.get("msg", "is not valid"))
    return message[:1].lower() + message[1:] + _got(value)
