"""docs/OPTIONS.md, written from the schema: every option's key, label, default, allowed values and
tooltip, one table per tab in the page's order. `scripts/options_doc.py` writes the file and a test
checks that it is current, so the reference cannot drift from the trainer.

The model parts (unet, text_encoder, transformer, ...) share one set of options: they are listed
once, with each part's own defaults where they differ.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from pydantic import BaseModel

from .fields import PLANNED, FieldInfo, iter_fields, nested_section
from .schema import TrainConfig

TAB_ORDER = ["general", "model", "data", "concepts", "training", "sampling", "backup", "lora", "embedding"]
TAB_TITLES = {"lora": "LoRA"}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

HEADER = """# Options

Every option of a config, as the page shows it (label and tooltip) and as a config JSON or
`--set key=value` names it (key). Generated from the schema (`ot_gradio/config/schema.py`) by
`.venv/bin/python scripts/options_doc.py`; a test fails when this file is out of date.
Key names and defaults are OneTrainer's, so its configs and presets load unchanged.

*Planned* options are kept so that OneTrainer's configs load, but the trainer does not act on
them yet: a config that sets one gets a warning, and the page does not show them. *Advanced*
options are folded away on the page. Options *not on the page* are OneTrainer bookkeeping kept so
that its files load, or settings OneTrainer itself replaces with another (its tooltip says
which). `concepts[].x` is an option of each concept and `samples[].x` of each sample; bounds are
inclusive unless written with < or >.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(value: Any) -> str:
    if isinstance(value, Enum):
        return f"`{value.value}`"
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, str) and UUID.fullmatch(value):
        return "a new id"  # made afresh for each config (an embedding's uuid)
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""`'
    if isinstance(value, (list, dict)) and not value:
        return "`[]`" if isinstance(value, list) else "`{}`"
    if isinstance(value, dict):
        return f"{len(value)} settings"
    return f"`{value}`"


def _allowed(info: FieldInfo) -> str:
    if info.choices:
        return ", ".join(f"`{c}`" for c in info.choices)
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    return ", ".join(f"{signs[k]} {v:g}" for k, v in info.bounds.items())


def _notes(info: FieldInfo) -> str:
    notes = []
    if info.status == PLANNED:
        notes.append("*planned*")
    if info.advanced:
        notes.append("*advanced*")
    if info.compat:
        notes.append("*not on the page*")
    return " ".join(notes)


def _row(info: FieldInfo, key: str) -> str:
    tooltip = info.tooltip + (f" {_notes(info)}" if _notes(info) else "")
    return f"| `{key}` | {_cell(info.label)} | {_value(info.default)} | {_allowed(info)} | {_cell(tooltip)} |"


TABLE_HEAD = ["| key | label | default | allowed | what it does |", "|---|---|---|---|---|"]


def _is_part(info: FieldInfo) -> bool:
    kind, cls = nested_section(info.type)
    return kind == "section" and cls is not None and cls.__name__.endswith("ModelPartConfig")


def render() -> str:
    fields = list(iter_fields(TrainConfig))
    parts = [f for f in fields if _is_part(f)]
    part_prefixes = tuple(f"{p.path}." for p in parts)
    by_tab: dict[str, list[FieldInfo]] = {}
    for info in fields:
        if info.group or info.path.startswith(part_prefixes) or info.tab is None:
            continue
        by_tab.setdefault(info.tab, []).append(info)
    tabs = [t for t in TAB_ORDER if t in by_tab] + sorted(t for t in by_tab if t not in TAB_ORDER)
    out = [HEADER]
    for tab in tabs:
        out += [f"## {TAB_TITLES.get(tab, tab.capitalize())}", "", *TABLE_HEAD]
        out += [_row(info, info.path) for info in by_tab[tab]]
        out.append("")
    out += _parts_section(fields, parts)
    return "\n".join(out).rstrip() + "\n"


def _part_status(part: FieldInfo, fields: list[FieldInfo]) -> str:
    """", planned" for a planned part, naming the fields of it the trainer acts on all the same."""
    if part.status != PLANNED:
        return ""
    acted = [f.path.split(".", 1)[1] for f in fields if f.path.startswith(part.path + ".") and f.status != PLANNED]
    return ", planned" + (f" but for {', '.join(f'`{a}`' for a in acted)}" if acted else "")


def _parts_section(fields: list[FieldInfo], parts: list[FieldInfo]) -> list[str]:
    out = [
        "## Model parts (Training tab)", "",
        "Each part of the model has its own group of these options; the page shows only the parts of",
        "the chosen model type. The parts: " + ", ".join(
            f"`{p.path}` ({_cell(p.label)}{_part_status(p, fields)})" for p in parts) + ".",
        "The table gives the `unet` part's defaults (keys written `<part>.key`); the other parts' own",
        "defaults follow it.", "", *TABLE_HEAD,
    ]
    first = parts[0].path
    reference: dict[str, FieldInfo] = {}
    for info in fields:
        if info.path.startswith(f"{first}."):
            key = info.path[len(first) + 1:]
            reference[key] = info
            out.append(_row(info, f"<part>.{key}"))
    out += ["", "| part | defaults that differ from the table |", "|---|---|"]
    for part in parts[1:]:
        own = {f.path[len(part.path) + 1:]: f for f in fields if f.path.startswith(f"{part.path}.")}
        differ = [f"`{key}` = {_value(info.default)}" for key, info in own.items()
                  if key not in reference or info.default != reference[key].default]
        extra = [f"`{key}` ({_cell(info.label)}: {_cell(info.tooltip)})" for key, info in own.items() if key not in reference]
        text = ", ".join(differ) or "none"
        if extra:
            text += "; its own options: " + ", ".join(extra)
        out.append(f"| `{part.path}` | {text} |")
    out.append("")
    return out
