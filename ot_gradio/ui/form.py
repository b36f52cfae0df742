"""Form fields built from the config schema, and the two conversions the page needs:
config dict -> component values, and component values -> config dict.

Every field shown here is one the trainer acts on (status "ok"); planned options are kept in
the config (so imported configs round-trip) but never shown as if they worked."""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any

import gradio as gr

from ..config.fields import FieldInfo, iter_fields
from ..config.schema import TrainConfig
from .browser import PathBrowser, path_kind


def _base_type(tp: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else tp), True
    return tp, False


@functools.cache
def _all_fields() -> tuple[FieldInfo, ...]:
    return tuple(iter_fields(TrainConfig))  # the page asks ~40 times while it is built


def schema_fields(prefix: str = "", tab: str | None = None) -> list[FieldInfo]:
    """The editable leaf fields under `prefix` (e.g. "" or "concepts[]."), optionally of one tab."""
    out = []
    for f in _all_fields():
        if not f.path.startswith(prefix) or f.group or f.status != "ok" or f.compat:
            continue
        rest = f.path[len(prefix):]
        if not prefix and "[]" in rest:
            continue  # list items have their own editors
        if f.path in ("config_version",) or f.path.endswith("concept_stats"):
            continue  # bookkeeping, not settings
        if tab is not None and f.tab != tab:
            continue
        out.append(f)
    return out


@dataclass
class Field:
    info: FieldInfo
    component: gr.components.Component
    nullable: bool
    browser: PathBrowser | None = None

    @property
    def path(self) -> str:
        return self.info.path


def make_component(info: FieldInfo, elem_prefix: str = "f") -> Field:
    tp, nullable = _base_type(info.type)
    label = info.label or info.path
    elem_id = f"{elem_prefix}-{info.path.replace('.', '-').replace('[]', '')}"
    default = info.default.value if isinstance(info.default, Enum) else info.default
    kw: dict[str, Any] = {"label": label, "info": info.tooltip, "elem_id": elem_id}
    if isinstance(tp, type) and issubclass(tp, bool):
        comp = gr.Checkbox(value=bool(default), **kw)
    elif info.choices:
        comp = gr.Dropdown(choices=list(info.choices), value=default, allow_custom_value=False, **kw)
    elif isinstance(tp, type) and issubclass(tp, int) and not nullable:
        # No minimum/maximum here: gradio would refuse an out-of-range value before any handler
        # runs, with a toast naming no field; the config validation names it with the others.
        comp = gr.Number(value=default, precision=0, **kw)
    else:
        # Floats are text, as in OneTrainer, so 3e-4 stays 3e-4 and a typo is reported by the
        # validation with the field's name; optional numbers may be blank (= the default).
        if (typing.get_origin(tp) or tp) in (dict, list):
            import json  # noqa: PLC0415

            default = json.dumps(default)
        text = "" if default is None else str(default)
        kind = path_kind(info.path)
        if kind is None:
            secret = {"type": "password"} if info.path.startswith("secrets.") else {}  # a token is never shown on the page
            return Field(info, gr.Textbox(value=text, placeholder="blank = default" if nullable else None, **secret, **kw), nullable)
        with gr.Row(equal_height=True):
            comp = gr.Textbox(value=text, placeholder="blank = default" if nullable else None, scale=5, **kw)
            browser = PathBrowser(kind, elem_id, comp, label)
        return Field(info, comp, nullable, browser)
    return Field(info, comp, nullable)


def edit_event(component: gr.components.Component):
    """The event that tells the page a field was edited. A Textbox's `input` fires only on keys,
    so a paste, the browser's autofill or a script filling it in is saved only on `change`
    (which also follows the page's own updates: saving those again writes the same values)."""
    return component.change if isinstance(component, gr.Textbox) else component.input


def build_fields(infos: list[FieldInfo], elem_prefix: str = "f") -> dict[str, Field]:
    return {i.path: make_component(i, elem_prefix) for i in infos}


# --- conversions ----------------------------------------------------------------------------
def get_path(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def _is_json(field: Field) -> bool:
    tp, _ = _base_type(field.info.type)
    return (typing.get_origin(tp) or tp) in (dict, list)


def to_display(field: Field, value: Any) -> Any:
    if isinstance(value, Enum):
        value = value.value
    if _is_json(field):
        import json  # noqa: PLC0415

        return json.dumps(value if value is not None else (field.info.default or None))
    if isinstance(field.component, gr.Textbox):
        return "" if value is None else str(value)
    return value


def from_display(field: Field, value: Any) -> Any:
    """The raw value for the config; the schema validates and explains bad input."""
    tp, nullable = _base_type(field.info.type)
    if _is_json(field):
        from .. import jsontext  # noqa: PLC0415

        try:
            return jsontext.loads(value) if str(value or "").strip() else (None if nullable else field.info.default)
        except ValueError:
            return value  # validation names the field
    if isinstance(field.component, gr.Textbox):
        text = "" if value is None else str(value).strip()
        if text == "" and nullable:
            return None
        if isinstance(tp, type) and issubclass(tp, (int, float)) and not issubclass(tp, bool):
            try:
                return tp(float(text)) if issubclass(tp, int) and float(text).is_integer() else float(text)
            except ValueError:
                return text  # validation names the field and what is allowed
        return value if value is not None else ""
    if isinstance(field.component, gr.Number) and value is not None:
        if isinstance(tp, type) and issubclass(tp, int) and float(value).is_integer():
            return int(value)
    return value


def values_from_config(fields: dict[str, Field], config: dict[str, Any]) -> dict[gr.components.Component, Any]:
    return {f.component: to_display(f, get_path(config, path)) for path, f in fields.items()}


def config_from_values(fields: dict[str, Field], values: dict[gr.components.Component, Any], base: dict[str, Any]) -> dict[str, Any]:
    import copy

    data = copy.deepcopy(base)
    for path, f in fields.items():
        if f.component in values:
            set_path(data, path, from_display(f, values[f.component]))
    return data
