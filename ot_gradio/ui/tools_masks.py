"""The Masks tool: paint `<image>-masklabel.png` over a concept's images in the browser.

The editor shows the image with the existing mask as a tinted layer; brush adds to the mask, the
eraser removes, Fill / Clear cover or empty it. Save writes the mask at the image's own size (the
editor may hand the canvas back scaled) through tools/masks.py. Every path is checked by the tools
context, so only folders this page may browse are opened or written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from ..data.images import limit_page_images, mask_path_for
from ..tools.masks import (
    OVERLAY_RGB,
    MaskError,
    editor_value,
    filled_value,
    image_size,
    list_images,
    mask_from_editor,
    overlay_preview,
    save_mask,
)
from .tools_tab import ToolInputError, ToolsContext

HAS_MASK = " · mask"


def _choices(folder: Path) -> list[tuple[str, str]]:
    """(label, file name) per image; the label says which images already have a mask."""
    return [(p.name + (HAS_MASK if mask_path_for(p).is_file() else ""), p.name) for p in list_images(folder)]


class MasksTool:
    def __init__(self, ctx: ToolsContext):
        self.ctx = ctx
        limit_page_images()  # what the browser sends is decoded in this process too
        first = ctx.concept_folders(ctx.config)
        self.prefilled = first[0] if first else ""  # built at start-up, from the config of that moment
        with gr.Row():
            self.folder = gr.Textbox(self.prefilled, label="Folder", scale=4, elem_id="masks-folder",
                                     info="A concept folder; empty = the first concept's folder.")
            self.open = gr.Button("Open", scale=0, elem_id="masks-open")
        self.opened = gr.State("")
        with gr.Row():
            self.prev = gr.Button("◀ Previous", scale=0, elem_id="masks-prev")
            self.image = gr.Dropdown([], value=None, label="Image", scale=4, elem_id="masks-image", filterable=True,
                                     info=f"Images and clips of the folder (a clip on its first frame); '{HAS_MASK.strip(' ·')}' marks those that have a mask.")
            self.next = gr.Button("Next ▶", scale=0, elem_id="masks-next")
        with gr.Row():
            with gr.Column(scale=3):
                self.editor = gr.ImageEditor(
                    type="numpy", image_mode="RGBA", sources=(), transforms=(), format="png", label="Mask (paint = train on it)",
                    brush=gr.Brush(colors=["rgb({}, {}, {})".format(*OVERLAY_RGB)], color_mode="fixed", default_size="auto"),
                    eraser=gr.Eraser(default_size="auto"), layers=True, elem_id="mask-editor", height=640,
                )
                with gr.Row():
                    self.fill = gr.Button("Fill (train on all)", elem_id="mask-fill")
                    self.clear = gr.Button("Clear (train on nothing)", elem_id="mask-clear")
                    self.preview = gr.Button("Preview", elem_id="mask-preview")
                    self.save = gr.Button("Save mask", variant="primary", elem_id="mask-save")
            with gr.Column(scale=2):
                self.overlay = gr.Image(label="Overlay (tinted = trained, dark = ignored)", interactive=False, elem_id="mask-overlay")
        self.status = gr.Markdown("", elem_id="mask-status")
        self._wire()

    def _wire(self) -> None:
        cfg = self.ctx.config_state
        shown = [self.image, self.editor, self.overlay, self.status]
        # An event's progress goes to the status line, never to the editor: gradio's page sends
        # the progress state of every event (the run bar polls each second) to each component
        # that was ever a progress target, and the editor answers each by uploading its image
        # and layers again: several uploads a second that made each brush move take seconds.
        quiet = {"show_progress_on": [self.status]}
        self.open.click(self.on_open, [self.folder, cfg], [self.opened, self.folder, *shown], **quiet)
        self.folder.submit(self.on_open, [self.folder, cfg], [self.opened, self.folder, *shown], **quiet)
        self.image.input(self.on_select, [self.image, self.opened, cfg], shown, **quiet)
        self.prev.click(lambda *a: self.on_step(-1, *a), [self.image, self.opened, cfg], shown, **quiet)
        self.next.click(lambda *a: self.on_step(1, *a), [self.image, self.opened, cfg], shown, **quiet)
        self.fill.click(lambda *a: self.on_fill(True, *a), [self.image, self.opened, cfg], [self.editor, self.overlay, self.status], **quiet)
        self.clear.click(lambda *a: self.on_fill(False, *a), [self.image, self.opened, cfg], [self.editor, self.overlay, self.status], **quiet)
        self.preview.click(self.on_preview, [self.editor, self.image, self.opened, cfg], [self.overlay, self.status])
        self.save.click(self.on_save, [self.editor, self.image, self.opened, cfg], [self.image, self.overlay, self.status])

    def follow_concepts(self, tab: gr.Tab) -> None:
        """When its tab is shown, a folder the user did not choose is the current first concept's."""
        tab.select(self.on_shown, [self.folder, self.ctx.config_state], self.folder, show_progress="hidden")

    def on_shown(self, folder: str, config: dict[str, Any]):
        current = self.ctx.concept_folders(config)
        value = str(folder or "").strip()
        if value in current or (value and value != self.prefilled and Path(value).is_dir()):
            return gr.skip()  # a concept's folder, or one the user typed
        return current[0] if current else ""

    # --- paths ------------------------------------------------------------------------------------
    def _folder(self, value: str, config: dict[str, Any]) -> Path:
        if not str(value or "").strip():
            raise ToolInputError("Folder: no folder opened; type a folder and press Open")
        return self.ctx.folder("Folder", value, config)

    def _image(self, name: str, opened: str, config: dict[str, Any]) -> Path:
        folder = self._folder(opened, config)
        if not name:
            raise ToolInputError("Image: pick an image first")
        if Path(name).name != name:
            raise ToolInputError(f"Image: '{name}' is not a file name in the folder")
        return self.ctx.file("Image", str(folder / name), config)

    # --- handlers (return values in the order of their outputs) ---------------------------------
    def _show(self, path: Path, choices: list[tuple[str, str]] | None = None) -> tuple:
        value = editor_value(path)
        w, h = image_size(path)
        mask = mask_path_for(path)
        note = f"{path.name} ({w}×{h}); " + (f"mask {mask.name} loaded" if mask.is_file() else "no mask yet (all black)")
        dropdown = gr.update(value=path.name) if choices is None else gr.update(choices=choices, value=path.name)
        return dropdown, value, overlay_preview(path, mask_from_editor(value, (w, h))), note

    def on_open(self, folder: str, config: dict[str, Any]) -> tuple:
        if not str(folder or "").strip():
            first = self.ctx.concept_folders(config)
            folder = first[0] if first else ""
        try:
            path = self._folder(folder, config)
            choices = _choices(path)
            if not choices:
                return str(path), folder, gr.update(choices=[], value=None), None, None, f"No images in {path}"
            return (str(path), folder, *self._show(path / choices[0][1], choices))
        except (ToolInputError, MaskError) as err:
            return "", folder, gr.skip(), gr.skip(), gr.skip(), f"⚠️ {err}"

    def on_select(self, name: str, opened: str, config: dict[str, Any]) -> tuple:
        try:
            return self._show(self._image(name, opened, config))
        except (ToolInputError, MaskError) as err:
            return gr.skip(), gr.skip(), gr.skip(), f"⚠️ {err}"

    def on_step(self, step: int, name: str, opened: str, config: dict[str, Any]) -> tuple:
        try:
            names = [p.name for p in list_images(self._folder(opened, config))]
            if not names:
                raise ToolInputError("Image: the folder has no images")
            index = names.index(name) + step if name in names else 0
            return self._show(self._image(names[index % len(names)], opened, config))
        except (ToolInputError, MaskError) as err:
            return gr.skip(), gr.skip(), gr.skip(), f"⚠️ {err}"

    def on_fill(self, white: bool, name: str, opened: str, config: dict[str, Any]) -> tuple:
        try:
            path = self._image(name, opened, config)
            value = filled_value(path, white)
            mask = mask_from_editor(value, image_size(path))
            return value, overlay_preview(path, mask), ("Filled" if white else "Cleared") + " the mask; Save mask to keep it"
        except (ToolInputError, MaskError) as err:
            return gr.skip(), gr.skip(), f"⚠️ {err}"

    def on_preview(self, value: dict[str, Any] | None, name: str, opened: str, config: dict[str, Any]) -> tuple:
        try:
            path = self._image(name, opened, config)
            return overlay_preview(path, mask_from_editor(value, image_size(path))), "Preview of the unsaved mask"
        except (ToolInputError, MaskError) as err:
            return gr.skip(), f"⚠️ {err}"

    def on_save(self, value: dict[str, Any] | None, name: str, opened: str, config: dict[str, Any]) -> tuple:
        try:
            path = self._image(name, opened, config)
            size = image_size(path)
            mask = mask_from_editor(value, size)
            saved = save_mask(path, mask)
            choices = _choices(path.parent)
            share = 100.0 * sum(mask.histogram()[128:]) / (size[0] * size[1])
            note = f"saved {saved} ({size[0]}×{size[1]}), {share:.1f}% trained"
            if share == 0:
                note += " — the mask is all black: this image teaches nothing"
            return gr.update(choices=choices, value=path.name), overlay_preview(path, mask), note
        except (ToolInputError, MaskError, OSError) as err:
            return gr.skip(), gr.skip(), f"⚠️ not saved: {err}"
