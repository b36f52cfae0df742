"""The page's file browser for its path fields: a Browse button next to each field opens one
sidebar with a folder box, a list of what the folder holds, and "Use this". It shows only the
allowed roots (paths.py checks every request on the server, whatever the browser sends); typing
a path into the field itself still works. Never a desktop dialog: the page may be open on
another machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from .paths import PathRefused, check, list_folder, parent, start_folder

# What a path field holds: a folder, an existing file, either (a hub id, a diffusers folder or a
# single file), or a file still to be written (pick its folder; the file name is kept).
DIR, FILE, ANY, SAVE = "dir", "file", "any", "save"
PATH_KINDS = {
    "base_model_name": ANY,
    "output_model_destination": SAVE,
    "workspace_dir": DIR,
    "cache_dir": DIR,
    "huggingface_cache_dir": DIR,
    "debug_dir": DIR,
    "lora_model_name": FILE,
    "quantization.cache_dir": DIR,
    "embedding.model_name": FILE,
    "additional_embeddings[].model_name": FILE,
    "concepts[].path": DIR,
    "concepts[].text.prompt_path": FILE,
    "concepts[].text.captions_file": FILE,
    "samples[].base_image_path": FILE,
    "samples[].mask_image_path": FILE,
    "samples[].control_image": FILE,
}


def path_kind(path: str) -> str | None:
    """The browser kind of a config field, or None for fields that are not paths. A model
    part's `model_name` (load that part from another model) takes what base_model_name takes."""
    if path in PATH_KINDS:
        return PATH_KINDS[path]
    if path.count(".") == 1 and path.endswith(".model_name"):
        return ANY
    return None


RootsFn = Callable[[dict[str, Any]], list[Path]]


class BrowserPanel:
    """The page's one file browser, in a sidebar on the right: it serves every path field (one
    panel per field cost the page ~110 components and ~70 handlers at start-up). `target` holds
    the elem_id of the field whose Browse button opened it."""

    def __init__(self):
        with gr.Sidebar(open=False, position="right", width=420, elem_id="browser") as self.sidebar:
            self.title = gr.Markdown("Press **Browse** next to a path field to choose it here.", elem_id="browse-title")
            self.target = gr.State("")
            self.folder = gr.Textbox(label="Folder", info="Type a folder and press Enter, or open one below. Blank = the folders this page may show.",
                                     elem_id="browse-folder")
            self.entries = gr.Dropdown(label="Contents", choices=[], value=None, allow_custom_value=True, interactive=True,
                                       info="Choosing a folder opens it; choosing a file picks it (a folder field shows its files but takes the folder).",
                                       elem_id="browse-entries")
            self.message = gr.Markdown("", elem_id="browse-message")
            with gr.Row():
                self.use = gr.Button("Use this", variant="primary", elem_id="browse-use")
                self.up = gr.Button("Up", elem_id="browse-up")
                self.close = gr.Button("Close", elem_id="browse-close")
        self.browsers: dict[str, PathBrowser] = {}
        self.roots: RootsFn = lambda config: []

    def _browser(self, target: str) -> PathBrowser:
        browser = self.browsers.get(target)
        if browser is None:
            raise PathRefused("press Browse next to a path field first")
        return browser

    def for_target(self, target: str, run: Callable[[PathBrowser], dict]) -> dict:
        """`run` on the browser of field `target`, a refusal as the panel's message."""
        try:
            return run(self._browser(target))
        except PathRefused as err:
            return {self.message: f"**Refused:** {err}"}

    def hide(self) -> dict:
        return {self.sidebar: gr.update(open=False)}

    # --- wiring ---------------------------------------------------------------------------------
    def wire(self, browsers: list[PathBrowser], config_state: gr.State, roots: RootsFn,
             then: tuple[Callable, Any, Any] | None = None) -> None:
        """`then` runs after a path was put into a field, as an edit of the field would; its
        inputs may include `target` to tell which field it was."""
        self.roots = roots
        for browser in browsers:
            browser.panel = self
            self.browsers[browser.elem_id] = browser
        view = [self.sidebar, self.folder, self.entries, self.message]
        for browser in browsers:
            browser.button.click(browser.open, [browser.field, config_state], [*view, self.title, self.target], show_progress="hidden")
        self.folder.submit(lambda t, typed, c: self.for_target(t, lambda b: b.go(typed, c)),
                           [self.target, self.folder, config_state], view, show_progress="hidden")
        self.entries.input(lambda t, selected, folder, c: self.for_target(t, lambda b: b.pick(selected, folder, c)),
                           [self.target, self.entries, self.folder, config_state], view, show_progress="hidden")
        self.up.click(lambda t, folder, c: self.for_target(t, lambda b: b.go_up(folder, c)),
                      [self.target, self.folder, config_state], view, show_progress="hidden")
        self.close.click(self.hide, None, [self.sidebar], show_progress="hidden")
        fields = [b.field for b in browsers]

        def use(values: dict) -> dict:
            target = values[self.target]
            return self.for_target(target, lambda b: b.use_it(values[self.folder], values[self.entries], values[b.field], values[config_state]))

        event = self.use.click(use, {self.target, self.folder, self.entries, config_state, *fields}, [*fields, self.sidebar, self.message],
                               show_progress="hidden")
        if then is not None:
            event.then(*then, show_progress="hidden", show_progress_on=[self.message])


class PathBrowser:
    """The Browse button of one path `field` (put it in the field's row). It opens the page's
    BrowserPanel for this field; the handlers below run on the panel for it."""

    def __init__(self, kind: str, elem_id: str, field: gr.components.Component, label: str = ""):
        self.kind, self.elem_id, self.field, self.label = kind, elem_id, field, label or elem_id
        self.button = gr.Button("Browse", scale=0, min_width=90, elem_id=f"{elem_id}-browse")
        self.panel: BrowserPanel | None = None  # set when the page wires its panel

    def roots(self, config: dict[str, Any]) -> list[Path]:
        return self.panel.roots(config) if self.panel is not None else []

    @property
    def group(self) -> gr.Sidebar:
        return self.panel.sidebar

    @property
    def folder(self) -> gr.Textbox:
        return self.panel.folder

    @property
    def entries(self) -> gr.Dropdown:
        return self.panel.entries

    @property
    def message(self) -> gr.Markdown:
        return self.panel.message

    # --- handlers (plain values in, {component: value} out) -----------------------------------
    def show(self, folder: Path | None, roots: list[Path], message: str = "") -> dict:
        if folder is None:
            choices = [(f"📁 {r}", str(r)) for r in roots]
            if not roots:
                message = message or "No folder may be browsed."
        else:
            entries = list_folder(folder, roots)
            # a folder field lists the files too, marked as not choosable, so that the user sees
            # the images and knows this is the right folder
            marked = "  · {} (file)" if self.kind == DIR else "📄 {}"
            choices = [(f"📁 {e.name}" if e.is_dir else marked.format(e.name), str(e.path)) for e in entries]
            files = sum(not e.is_dir for e in entries)
            if not choices:
                message = message or "(empty folder)"
            elif self.kind == DIR and files:
                message = message or f"{files} file(s) here. *Use this* chooses this folder."
        return {self.group: gr.update(open=True), self.folder: "" if folder is None else str(folder),
                self.entries: gr.update(choices=choices, value=None), self.message: message}

    def open(self, value: str, config: dict[str, Any]) -> dict:
        roots = self.roots(config)
        wanted = {DIR: "a folder", FILE: "a file", ANY: "a folder or a file", SAVE: "the folder to save in"}[self.kind]
        return {**self.show(start_folder(value, roots), roots), self.panel.title: f"Choose {wanted} for **{self.label}**.",
                self.panel.target: self.elem_id}

    def go(self, typed: str, config: dict[str, Any]) -> dict:
        """The folder typed into the folder box; refused with a message outside the roots."""
        roots = self.roots(config)
        if not str(typed or "").strip():
            return self.show(None, roots)
        try:
            return self.show(check(typed, roots), roots)
        except PathRefused as err:
            return self.show(None, roots, f"**Refused:** {err}")

    def pick(self, selected: str | None, folder: str, config: dict[str, Any]) -> dict:
        """A folder chosen in the list opens; a file stays selected for "Use this"."""
        roots = self.roots(config)
        if not selected:
            return {self.message: gr.update()}  # not {}: gradio reads an empty dict as one value, too few outputs
        try:
            path = check(selected, roots)
        except PathRefused as err:
            return self.show(None, roots, f"**Refused:** {err}")
        if path.is_dir():
            return self.show(path, roots)
        if self.kind == DIR:
            return {self.message: f"`{path.name}` is a file: this field takes a folder. *Use this* chooses the open folder."}
        return {self.message: f"Selected `{path.name}`: press *Use this*."}

    def go_up(self, folder: str, config: dict[str, Any]) -> dict:
        roots = self.roots(config)
        if not str(folder or "").strip():
            return self.show(None, roots)
        try:
            return self.show(parent(check(folder, roots), roots), roots)
        except PathRefused as err:
            return self.show(None, roots, f"**Refused:** {err}")

    def chosen(self, folder: str, selected: str | None, current: str, config: dict[str, Any]) -> Path:
        """The path "Use this" writes into the field (checked again: never trust the page)."""
        roots = self.roots(config)
        here = check(folder, roots) if str(folder or "").strip() else None
        picked = check(selected, roots) if selected else None
        if picked is not None and picked.is_dir():
            here, picked = picked, None
        if self.kind == FILE:
            if picked is None or not picked.is_file():
                raise PathRefused("choose a file in the list first")
            return picked
        if picked is not None and picked.is_file() and self.kind in (ANY, SAVE):
            return picked
        if here is None:
            raise PathRefused("open a folder first")
        if self.kind == SAVE:
            name = Path(str(current or "").strip()).name or "model.safetensors"
            return check(here / name, roots)
        return here

    def use_it(self, folder: str, selected: str | None, current: str, config: dict[str, Any]) -> dict:
        try:
            path = self.chosen(folder, selected, current, config)
        except PathRefused as err:
            return {self.message: f"**Refused:** {err}"}
        return {self.field: str(path), self.group: gr.update(open=False), self.message: ""}
