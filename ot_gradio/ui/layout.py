"""How a tab's plain fields are grouped on the page: titled groups (OneTrainer's grouping of the
Training tab; a field names its group with `heading=` on its schema line), each laid out by the
page's CSS grid (`.ot-grid`) in 2-3 columns on a wide screen and one on a phone. Gradio-free and
torch-free, so it is tested on its own."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from ..config.fields import iter_fields
from ..config.schema import TrainConfig

# The schema's tabs (a field's `tab=`) as the page titles them, in the page's order
TAB_TITLES = {"general": "General", "model": "Model", "data": "Data", "training": "Training", "sampling": "Sampling",
              "backup": "Backup", "lora": "LoRA", "embedding": "Embedding", "concepts": "Concepts"}

# Tabs whose groups flow in CSS columns (`.ot-cols`: 6 columns at 1600 px, one on a phone)
COLUMNS = {"training"}

# Groups that start closed: only those OneTrainer also keeps out of its Training tab, behind a
# "..." button that opens a window of their own (the timestep distribution's settings; the
# optimizer's own parameters, see OPTIMIZER_SETTINGS), and kohya's noise options, which OneTrainer
# has none of (a kohya config's import sets them). Everything else starts open.
CLOSED = {"training": {"Timestep distribution", "kohya's noise options"}}
OPTIMIZER_SETTINGS = "Optimizer settings"  # the chosen optimizer's parameters: OneTrainer's "..." window beside the optimizer


def group_open(tab: str, title: str) -> bool:
    """Whether a titled group of `tab` starts open."""
    return title not in CLOSED.get(tab, set())


@cache
def _headings() -> dict[str, str]:
    return {f.path: f.heading for f in iter_fields(TrainConfig) if f.heading}


def group_paths(paths: Sequence[str]) -> list[tuple[str, list[str]]]:
    """[(title, paths)] for `paths` of one tab, grouped under their fields' `heading` (the
    schema's), in their order within each group; groups in the order of their first field;
    fields without a heading first under "" (untitled). Every path is in exactly one group."""
    headings = _headings()
    out: dict[str, list[str]] = {"": []}
    for path in paths:
        out.setdefault(headings.get(path, ""), []).append(path)
    return [(title, items) for title, items in out.items() if items]
