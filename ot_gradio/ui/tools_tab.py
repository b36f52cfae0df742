"""The Tools tab: one sub-tab per tool, each built by its own module from a `ToolsContext`.

The context gives a tool the job supervisor (heavy tools run in a worker process), the page's
config state (its concept folders are offered as datasets) and the path checks: a folder or file
typed in a tool must lie inside the folders this page may use (the workspace, the start folder,
--browse-root; fixed at start-up), the same rule as the file browser's."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field, replace
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
    ("Video", "tools_video", "VideoTool"),
    ("Dataset report", "tools_report", "ReportTool"),
    ("Convert", "tools_convert", "ConvertTool"),
    ("Sample", "tools_sample", "SampleTool"),
)


# Built with the page, not on first open: the mask editor. Built in a gr.render its canvas came
# up 0x0 unless built while its tab shows, and one CI run of the mask test then saw a click on
# Next wait over 30 s (it passed in three runs here); built at start-up it has always passed.
BUILT_AT_START = {"tools_masks"}


class ToolInputError(ValueError):
    """A field of a tool holds something unusable; the message names the field."""


@dataclass
class ToolsContext:
    workspace: Path
    jobs: JobSupervisor
    config_state: gr.State
    roots: Callable[[dict[str, Any]], list[Path]]
    config: dict[str, Any] = field(default_factory=dict)  # the session's config when the tools were built

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

    @staticmethod
    def captions_file_note(folder: Path, config: dict[str, Any]) -> str:
        """For a folder whose concept takes its captions from its Captions file: that the caption
        files the tools write there are not what it trains with; '' otherwise."""
        for concept in (config or {}).get("concepts") or []:
            text = concept.get("text") or {}
            named = str(text.get("captions_file") or "").strip()
            if (not named or str(text.get("prompt_source") or "sample") != "sample" or not str(concept.get("path") or "").strip()
                    or not concept.get("enabled", True)):
                continue
            try:
                same = Path(str(concept["path"])).expanduser().resolve() == Path(folder).resolve()
            except (OSError, ValueError):
                same = False
            if same:
                return (f"concept '{concept.get('name') or concept['path']}' trains with the captions of its Captions file "
                        f"{named}, not with caption files in this folder")
        return ""

    def folder_picker(self, key: str) -> tuple[gr.Dropdown, gr.Checkbox]:
        """A folder tool's first row (elem ids `<key>-folder`, `<key>-subfolders`): the folder, one
        of the session's concept folders (the first at start, the choices following the concepts)
        or a typed path, and "Include subfolders"."""
        with gr.Row():
            folders = self.concept_folders(self.config)
            folder = gr.Dropdown(label="Folder", choices=folders, allow_custom_value=True, value=folders[0] if folders else "", scale=3,
                                 info="a concept folder, or type a path", elem_id=f"{key}-folder")
            subfolders = gr.Checkbox(label="Include subfolders", value=False, elem_id=f"{key}-subfolders")
        self.config_state.change(self.folder_choices, [self.config_state, folder], [folder])
        return folder, subfolders

    def folder_choices(self, config: dict[str, Any], current: str) -> dict[str, Any]:
        folders = self.concept_folders(config)
        return gr.update(choices=folders, value=current or (folders[0] if folders else ""))


def launch_checked(panel, name: str, params: Callable[[], dict[str, Any]]) -> tuple:
    """A tool's start: the job `name` with `params()` on its JobPanel, or, when a field is not
    usable (the ToolInputError `params` raises), the panel's refusal naming it; nothing starts."""
    try:
        checked = params()
    except ToolInputError as err:
        return panel.refused(str(err))
    return panel.launch(name, checked)


def _build_on_first_open(openers: list, build: Callable[[ToolsContext], Any], ctx: ToolsContext) -> None:
    """Build a tool the first time one of `openers` (tab select events) fires in a session."""
    opened = gr.State(False)
    # One at a time: the Tools tab and its first sub-tab both open the first tool, and their two
    # events run at once each saw the State still False, each changed it, and the tool was built
    # twice; the second build put the text a user had typed meanwhile back to its first value.
    for opener in openers:
        opener(lambda: True, None, opened, show_progress="hidden", concurrency_id=f"open-tool-{opened._id}", concurrency_limit=1)

    @gr.render(inputs=[opened, ctx.config_state], triggers=[opened.change], show_progress="hidden")
    def _tool(is_open: bool, config: dict[str, Any]) -> None:
        if is_open:
            build(replace(ctx, config=config or {}))
            _editable_inputs()


def _editable_inputs() -> None:
    """Make the components an event of this render reads editable. Gradio's page does that by
    itself for components built at start-up (an input without `interactive` is editable), but
    not for those built in a gr.render (gradio 6.31: their text boxes came up disabled)."""
    from gradio.context import LocalContext  # noqa: PLC0415

    config, render = LocalContext.blocks_config.get(None), LocalContext.renderable.get(None)
    if config is None or render is None:
        return
    read = {id(c) for fn in config.fns.values() if fn.rendered_in is render for c in fn.inputs}
    for block in config.blocks.values():
        if block.rendered_in is render and id(block) in read and getattr(block, "interactive", False) is None:
            block.interactive = True


def build_tools(ctx: ToolsContext, tools_tab: gr.Tab | None = None) -> dict[str, Any]:
    """Build every available tool's sub-tab inside the current gr.Tab; returns those built now, by title.

    With `tools_tab`, each tool is built the first time a session opens its sub-tab (the first
    one: when `tools_tab` opens), not at start-up: their ~200 components and ~40 handlers were a
    fifth of the page's start-up. Built per session with that session's config, a tool starts on
    the concepts the user has now; built while its tab shows, the mask editor gets its size."""
    built: dict[str, Any] = {}
    openers = [tools_tab.select] if tools_tab is not None else []
    with gr.Tabs():
        for title, module, cls in TOOLS:
            name = f"ot_gradio.ui.{module}"
            if importlib.util.find_spec(name) is None:
                continue
            def tool(ctx: ToolsContext, name: str = name, cls: str = cls) -> Any:  # imported when first built
                return getattr(importlib.import_module(name), cls)(ctx)

            with gr.Tab(title, id=f"tool-{module}", elem_id=f"tool-{module}") as tab:
                if tools_tab is None or module in BUILT_AT_START:
                    built[title] = tool(ctx)
                    if hasattr(built[title], "follow_concepts"):  # built before the session's config was known
                        built[title].follow_concepts(tab)
                else:
                    _build_on_first_open([tab.select, *openers], tool, ctx)
                    openers = []  # the Tools tab opens on its first sub-tab
    return built
