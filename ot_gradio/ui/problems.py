"""A refusal as the page shows it: the validation, the doctor and the pre-run check name fields by
their config key ("batch_size: must be >= 1", "concepts[0].path: ..."); on the page the user sees
tabs and labels, so each key becomes where to find the field ("Training → Batch size",
"Concepts → Concept 1 'mycat' → Folder"). Read from the schema's labels and tabs; the CLI keeps
the keys. Gradio-free and torch-free."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from ..config.fields import FieldInfo, iter_fields
from ..config.schema import TrainConfig
from .layout import OPTIMIZER_SETTINGS, TAB_TITLES
from .visibility import part_of

# a problem's field names: "key: text" or "key / other_key: text"
_HEAD = re.compile(r"^(?P<keys>[A-Za-z_][\w.\[\]]*(?: / [A-Za-z_][\w.\[\]]*)*): (?P<text>.*)$", re.S)
_INDEX = re.compile(r"^(?P<list>\w+)\[(?P<index>\d+)\]\.(?P<rest>.+)$")
ITEM_NAMES = {"concepts": "Concept", "samples": "Sample", "additional_embeddings": "Additional embedding"}


@cache
def _fields() -> dict[str, FieldInfo]:
    return {f.path: f for f in iter_fields(TrainConfig)}


def _label(path: str) -> str:
    info = _fields().get(path)
    return (info.label if info else "") or path.rsplit(".", 1)[-1]


def field_place(key: str, config: dict[str, Any] | None = None) -> str | None:
    """Where the field of config `key` is on the page ("Training → UNet → Learning rate"), or
    None for a key the schema does not know (the problem is then shown as it is)."""
    config = config or {}
    item = _INDEX.match(key)
    if item:
        name, index, rest = item["list"], int(item["index"]), item["rest"]
        info = _fields().get(f"{name}[].{rest}")
        if info is None:
            return None
        entries = config.get(name)
        entry = entries[index] if isinstance(entries, list) and index < len(entries) and isinstance(entries[index], dict) else {}
        title = f"{ITEM_NAMES.get(name, _label(name))} {index + 1}"
        shown = str(entry.get("name") or entry.get("prompt") or "").strip()
        if shown:
            title += f" '{shown[:40]}'"
        return " → ".join([TAB_TITLES.get(info.tab or "", "") or TAB_TITLES.get(name, name), title, info.label or rest])
    info = _fields().get(key)
    if info is None:
        return None
    steps = [TAB_TITLES.get(info.tab or "", info.tab or "")]
    part = part_of(key)
    if key.startswith("optimizer.") and key != "optimizer.optimizer":
        steps.append(OPTIMIZER_SETTINGS)
    elif part is not None and "." in key:
        steps.append(_label(part))
    steps.append(info.label or key)
    return " → ".join(s for s in steps if s)


def on_screen(problem: str, config: dict[str, Any] | None = None) -> str:
    """`problem` with its leading config keys replaced by their tabs and labels."""
    head = _HEAD.match(problem)
    if not head:
        return problem
    places = [field_place(k, config) for k in head["keys"].split(" / ")]
    if not all(places):
        return problem
    return f"{' / '.join(places)}: {head['text']}"


PROBLEMS_TITLE = "### Fix these before starting"


def problems_markdown(problems: list[str], config: dict[str, Any] | None = None) -> str:
    """The refused Start's list, each problem by tab and label."""
    return PROBLEMS_TITLE + "\n" + "\n".join(f"- `{on_screen(p, config)}`" for p in problems)


def rechecked(shown: str, problems: list[str], config: dict[str, Any] | None = None) -> str | None:
    """The list after an edit: None (leave it) unless a refused Start's list is on screen; then
    what is left of it, so a fixed problem does not stay until the next Start."""
    if not str(shown or "").startswith(PROBLEMS_TITLE):
        return None
    return problems_markdown(problems, config) if problems else "**No problems left:** press **Start**."
