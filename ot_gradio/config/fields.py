"""The one way to declare a config option.

Every option is one line: ``name: type = opt(default, "Label", "Tooltip", tab=..., ge=..., le=...)``.
The page, validation, JSON, CLI overrides and docs read label, tooltip, tab, bounds and the
``implemented`` flag from the field's metadata, so they cannot drift from the trainer. What else
is known about one option (when the page shows it, under which heading, whether it reaches the
training step, whether a backup must share it) is on the same line, so a new option is one line.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .catalogue import offered_values
from .conditions import PartRule

# Options the trainer does not act on yet. The page marks them and the doctor warns when a
# config sets one away from its default, so no setting is silently ignored.
PLANNED = "planned"


def opt(
    default: Any = ...,
    label: str = "",
    tooltip: str = "",
    *,
    tab: str | None = None,
    ge: float | None = None,
    le: float | None = None,
    gt: float | None = None,
    lt: float | None = None,
    status: str = "ok",
    advanced: bool = False,
    default_factory: Any = None,
    choices: list[str] | None = None,
    compat: bool = False,
    allow_inf: bool = False,
    applies_when: Any = None,
    first: int = 0,
    heading: str | None = None,
    in_step: bool = True,
    backup_must_match: Any = False,
    on_frozen_part: bool = False,
    text_encoder_only: bool = False,
    acted_on: tuple[str, ...] = (),
) -> Any:
    """``compat=True`` marks OneTrainer bookkeeping kept so its configs round-trip (file names,
    remembered optimizer settings, ids): never reported as an unsupported option.
    ``allow_inf=True``: the float may be infinite (it means "no limit"); numbers are otherwise
    finite and within float32 range (see Section).

    The page: ``applies_when`` (a conditions.Rule; a model part's setting may take a
    conditions.PartRule, bound to the part that holds it) shows the field only while the rest of
    the config makes it mean something; ``first=n`` puts it n-th at the top of its tab, before the
    fields in schema order; ``heading`` is the titled group it is shown under (groups appear in
    the order of their first field). The trainer: ``in_step=False`` for a setting that does not
    reach the training step (the memory probe's result is reused across it); ``backup_must_match``
    for a setting a backup must share with the run that continues it: True, or a conditions.Rule
    on this run's config (a LoRA's structure matters only to the LORA method), or for a model part's
    setting a conditions.PartRule (which part holds it: the LoRA trains no VAE). A model part's setting:
    ``on_frozen_part`` also shown for a part that only loads and encodes (VAE, VQGAN...);
    ``text_encoder_only`` shown only for text encoders. A PLANNED group's ``acted_on``: the names of
    its fields the trainer does act on (the rest are planned)."""
    extra: dict[str, Any] = {"label": label, "tooltip": tooltip, "status": status}
    if acted_on:
        extra["acted_on"] = tuple(acted_on)
    if tab:
        extra["tab"] = tab
    if applies_when is not None:
        extra["applies_when"] = applies_when
    if first:
        extra["first"] = first
    if heading:
        extra["heading"] = heading
    if not in_step:
        extra["in_step"] = False
    if backup_must_match:
        extra["backup_must_match"] = backup_must_match
    if on_frozen_part:
        extra["on_frozen_part"] = True
    if text_encoder_only:
        extra["text_encoder_only"] = True
    if advanced:
        extra["advanced"] = True
    if compat:
        extra["compat"] = True
    if choices:
        extra["choices"] = choices
    kwargs: dict[str, Any] = {"description": tooltip, "json_schema_extra": extra}
    for key, value in (("ge", ge), ("le", le), ("gt", gt), ("lt", lt)):
        if value is not None:
            kwargs[key] = value
    if allow_inf:
        kwargs["allow_inf_nan"] = True
        extra["allow_inf"] = True
    if default_factory is not None:
        return Field(default_factory=default_factory, **kwargs)
    return Field(default, **kwargs)


FLOAT_LIMIT = 3.4028234663852886e38  # the largest float32: weights, learning rates and losses are float32 or smaller
INT_LIMIT = 2**63 - 1  # the largest int64 (torch, numpy)


def _number_kind(annotation: Any) -> type | None:
    """int or float for a numeric field (``X | None`` too); None for anything else."""
    annotation = strip_optional(annotation)
    return annotation if annotation in (int, float) else None


def _has_surrogate(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if depth < 8 and isinstance(value, dict):
        return any(_has_surrogate(k, depth + 1) or _has_surrogate(v, depth + 1) for k, v in value.items())
    if depth < 8 and isinstance(value, list):
        return any(_has_surrogate(v, depth + 1) for v in value)
    return False


class Section(BaseModel):
    """Base of every config group: unknown keys are an error here (the loader warns and drops
    them before validation), assignments are validated.

    Numbers are numbers: true/false is refused for a numeric field, a float must be finite (no
    NaN, Infinity or "inf"; a field declared with ``opt(allow_inf=True)`` may be infinite) and
    within float32 range, a whole number within int64 range; text must be encodable as UTF-8.
    One rule for every field of every group (concepts, samples, model parts, optimizer settings)."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, use_enum_values=False, ser_json_inf_nan="strings",
        allow_inf_nan=False,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _valid_text_and_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        info_ = cls.model_fields.get(info.field_name or "")
        nested = info_ is not None and nested_section(info_.annotation)[0] is not None  # its own fields check
        if not nested and _has_surrogate(value):  # text that cannot be written as UTF-8 (a broken file or paste)
            raise ValueError("must be valid text: it holds a broken character (an unpaired UTF-16 surrogate such as \\udcff)")
        if isinstance(value, bool) and info_ is not None:
            kind = _number_kind(info_.annotation)
            if kind is not None:
                raise ValueError(f"must be a {'whole ' if kind is int else ''}number, not true or false")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _numbers_in_range(cls, value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):  # NaN even where infinity is allowed
            raise ValueError("must be a number, not NaN")
        if isinstance(value, float) and math.isfinite(value) and abs(value) > FLOAT_LIMIT:
            raise ValueError(f"must be between -{FLOAT_LIMIT:.4g} and {FLOAT_LIMIT:.4g}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_LIMIT:
            raise ValueError(f"must be a whole number between -{INT_LIMIT} and {INT_LIMIT}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _merge_onto_defaults(cls, data: Any) -> Any:
        """A partial group (``"text_encoder": {"weight_dtype": "FLOAT_16"}``) fills the keys it
        leaves out from this field's default, not from the bare group class, as OneTrainer does:
        the text encoder keeps its "stop after 30 epochs", the cloud dict its other settings."""
        if not isinstance(data, dict):
            return data
        out = None
        for name, info in cls.model_fields.items():
            value = data.get(name)
            if not isinstance(value, dict) or info.default_factory is None:
                continue
            default = info.default_factory()
            if isinstance(default, BaseModel):
                default = default.model_dump()
            if isinstance(default, dict) and default:
                out = out if out is not None else dict(data)
                out[name] = _deep_merge(default, value)
        return out if out is not None else data


def _deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        merged[key] = _deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def field_meta(model: type[BaseModel], name: str) -> dict[str, Any]:
    info = model.model_fields[name]
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return dict(extra)


@dataclass(frozen=True)
class FieldInfo:
    """One option as the page, the docs and the doctor see it. ``path`` is dotted; list items
    appear as ``concepts[].name``. ``status`` is PLANNED when the field or any group holding it is."""

    path: str
    type: Any
    default: Any
    label: str
    tooltip: str
    tab: str | None
    bounds: dict[str, float] = field(default_factory=dict)
    choices: list[str] | None = None
    status: str = "ok"
    advanced: bool = False
    group: bool = False
    compat: bool = False
    applies_when: Any = None
    first: int = 0
    heading: str | None = None
    in_step: bool = True
    backup_must_match: Any = False  # True, or a conditions.Rule (a part's: bound to it): when the backup must share it


def strip_optional(annotation: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def nested_section(annotation: Any) -> tuple[str | None, type[Section] | None]:
    """Which kind of nested group a field holds: ("section", cls), ("list", cls) for a list of
    sections, ("dict", cls) for a dict of sections, or (None, None) for a plain value."""
    annotation = strip_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return "section", annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and args and isinstance(args[0], type) and issubclass(args[0], Section):
        return "list", args[0]
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], Section):
        return "dict", args[1]
    return None, None


def enum_of(annotation: Any) -> type[Enum] | None:
    annotation = strip_optional(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, Enum) else None


def _bounds(info: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in info.metadata:
        for name, kind in (("ge", annotated_types.Ge), ("le", annotated_types.Le),
                           ("gt", annotated_types.Gt), ("lt", annotated_types.Lt)):
            if isinstance(item, kind):
                out[name] = getattr(item, name)
    return out


def _for_part(rule: Any, prefix: str) -> Any:
    """A model part's rule (conditions.PartRule) as the Rule of the part that holds the field."""
    return rule.at(prefix.split(".")[0]) if isinstance(rule, PartRule) else rule


def iter_fields(model_cls: type[BaseModel], prefix: str = "", *, defaults: BaseModel | None = None,
                tab: str | None = None, planned: bool = False, acted_on: tuple[str, ...] = ()) -> Iterator[FieldInfo]:
    """Every option of ``model_cls`` and of the groups nested in it, depth first, in schema order.

    Defaults of nested groups are the parent's (e.g. ``text_encoder.stop_training_after`` is 30,
    not the bare part's None)."""
    defaults = defaults if defaults is not None else model_cls()
    for name, info in model_cls.model_fields.items():
        meta = field_meta(model_cls, name)
        path = f"{prefix}{name}"
        is_planned = (planned and name not in acted_on) or meta.get("status") == PLANNED
        field_tab = meta.get("tab") or tab
        kind, cls = nested_section(info.annotation)
        enum = enum_of(info.annotation)
        choices = meta.get("choices") or (offered_values(enum) if enum else None)  # only what trains (catalogue.py)
        default = getattr(defaults, name)
        yield FieldInfo(
            path=path, type=info.annotation, default=default, label=meta.get("label", ""),
            tooltip=meta.get("tooltip", ""), tab=field_tab, bounds=_bounds(info), choices=choices,
            status=PLANNED if is_planned else meta.get("status", "ok"),
            advanced=bool(meta.get("advanced")), group=kind in ("section", "list"),
            compat=bool(meta.get("compat")), applies_when=_for_part(meta.get("applies_when"), prefix), first=int(meta.get("first", 0)),
            heading=meta.get("heading"), in_step=bool(meta.get("in_step", True)),
            backup_must_match=_for_part(meta.get("backup_must_match") or False, prefix),
        )
        if kind == "section":
            yield from iter_fields(cls, f"{path}.", defaults=default, tab=field_tab, planned=is_planned,
                                   acted_on=meta.get("acted_on", ()))
        elif kind == "list":
            yield from iter_fields(cls, f"{path}[].", defaults=cls(), tab=field_tab, planned=is_planned)
