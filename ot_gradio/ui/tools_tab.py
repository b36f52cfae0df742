"""The Tools tab: one sub-tab per tool, each built by its own module from a `ToolsContext`.

The context gives a tool the job supervisor (heavy tools run in a worker process), the page's
config state (its concept folders are offered as datasets) and the path checks: a folder or file
typed in a tool must lie inside the folders this page may browse (workspace, --browse-root, the
concepts' folders), the same rule as the file browser's."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from ..runner.jobs import JobSupervisor
from .paths import PathRefused, check

# (tab title, module under ot_gradio/ui, class name); a missing module leaves its tab out
TOOLS = (
    ("Captions", "tools_captions", "CaptionsTool"),
    ("Auto caption", "tools_autocaption", "AutoCaptionTool"),
    ("Masks", "tools_masks", "MasksTool"),
    ("Auto mask", "tools_automask", "AutoMaskTool"),
    ("Dataset report", "tools_report", "ReportTool"),
    ("Convert", "tools_convert", "ConvertTool"),
    ("Sample", "tools_sample", "SampleTool"),
)


class ToolInputError(ValueError):
    """A field of a tool holds something unusable; the message names the field."""


@dataclass
class ToolsContext:
    workspace: Path
    jobs: JobSupervisor
    config_state: gr.State
    roots: Callable[[dict[str, Any]], list[Path]]

    def path(self, field: str, value: str, config: dict[str, Any]) -> Path:
        try:
            return check(value, self.roots(config or {}))
        except PathRefused as err:
            raise ToolInputError(f"{field}: {err}") from None

    def folder(self, field: str, value: str, config: dict[str, Any]) -> Path:
        path = self.path(field, value, config)
        if not path.is_dir():
            raise ToolInputError(f"{field}: folder '{value}' does not exist")
        return path

    def file(self, field: str, value: str, config: dict[str, Any]) -> Path:
        path = self.path(field, value, config)
        if not path.exists():
            raise ToolInputError(f"{field}: '{value}' does not exist")
        return path

    def output(self, field: str, value: str, config: dict[str, Any]) -> Path:
        path = self.path(field, value, config)
        if not path.parent.is_dir():
            raise ToolInputError(f"{field}: the folder of '{value}' does not exist")
        return path

    @staticmethod
    def concept_folders(config: dict[str, Any]) -> list[str]:
        return [str(c.get("path")) for c in (config or {}).get("concepts") or [] if str(c.get("path") or "").strip()]


def build_tools(ctx: ToolsContext) -> dict[str, Any]:
    """Build every available tool's sub-tab inside the current gr.Tab; returns them by title."""
    built: dict[str, Any] = {}
    with gr.Tabs():
        for title, module, cls in TOOLS:
            name = f"ot_gradio.ui.{module}"
            if importlib.util.find_spec(name) is None:
                continue
            with gr.Tab(title, id=f"tool-{module}", elem_id=f"tool-{module}"):
                built[title] = getattr(importlib.import_module(name), cls)(ctx)
    return built
