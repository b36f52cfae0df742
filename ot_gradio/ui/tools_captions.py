"""Tools > Captions: a paged grid of a dataset's images with their captions, an editor for one
caption with keyboard navigation, and bulk edits with a preview and a one-step undo.

Gradio only; the work is in `tools.captions` (atomic writes, backups, undo journal). Handlers are
plain methods returning dicts keyed by component, so tests call them with what the page sends.
The keyboard hook is a small script attached the first time the caption box gets focus (the page's
`gr.Blocks` belongs to page.py): Enter clicks Save, Shift+Enter inserts a new line, Up on the first
line / Down on the last line click Previous / Next, which save an edited caption before moving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from ..tools import captions as core
from ..tools.captions import BulkOp, CaptionError, caption_file, normalize, page_of, read_caption, thumbnail
from .tools_tab import ToolInputError, ToolsContext

PAGE_SIZE = 24
DIFF_ROWS = 200
FIELD = "Dataset folder"
OPERATION_CHOICES = [("Find and replace", "replace"), ("Add prefix", "prefix"), ("Add suffix", "suffix"),
                     ("Add tags", "add_tags"), ("Remove tags", "remove_tags")]

KEYS_JS = """() => {
  const box = document.querySelector('#captions-editor textarea');
  if (!box || box.dataset.otKeys) return;
  box.dataset.otKeys = '1';
  const click = (id) => { const b = document.getElementById(id); if (b) b.click(); };
  box.addEventListener('keydown', (e) => {
    if (e.isComposing) return;
    if (e.key === 'Enter' && e.shiftKey) {
      e.preventDefault();
      box.setRangeText('\\n', box.selectionStart, box.selectionEnd, 'end');
      box.dispatchEvent(new Event('input', {bubbles: true}));
    } else if (e.key === 'Enter' && !e.ctrlKey && !e.altKey && !e.metaKey) {
      e.preventDefault(); click('captions-save');
    } else if (e.key === 'ArrowUp' && !box.value.slice(0, box.selectionStart).includes('\\n')) {
      e.preventDefault(); click('captions-prev');
    } else if (e.key === 'ArrowDown' && !box.value.slice(box.selectionEnd).includes('\\n')) {
      e.preventDefault(); click('captions-next');
    }
  });
}"""


def _label(name: str, caption: str, has: bool) -> str:
    text = " | ".join(caption.splitlines()) if has else "(no caption)"
    return f"{name}: {text[:120]}{'…' if len(text) > 120 else ''}"


MAX_PLAYED_CLIP = 256 * 1024**2  # a bigger clip is not copied to be played: its first frame in the grid stays
# containers a browser plays; other clips (.mkv, .avi, ...) are shown by their first frame in the grid only
PLAYED_CLIPS = (".mp4", ".m4v", ".webm", ".mov")


class CaptionsTool:
    def __init__(self, ctx: ToolsContext):
        self.ctx = ctx
        self.thumbs = Path(ctx.workspace) / "cache" / "caption-thumbs"
        initial = ctx.concept_folders(ctx.config)
        self.view = gr.State({})
        with gr.Row():
            self.folder = gr.Textbox(initial[0] if initial else "", label=FIELD, scale=4, elem_id="captions-folder",
                                     info="A concept's folder; captions are the .txt files next to the images and clips.")
            self.recursive = gr.Checkbox(False, label="Include sub-folders", scale=1)
            self.open_btn = gr.Button("Open", scale=0, elem_id="captions-open")
        self.status = gr.Markdown("", elem_id="captions-status")
        with gr.Row():
            with gr.Column(scale=3):
                self.gallery = gr.Gallery(interactive=False, label="Images", columns=6, height=560, allow_preview=False, object_fit="cover",
                                          elem_id="captions-gallery")
                with gr.Row():
                    self.prev_page = gr.Button("◀ Page", scale=0, elem_id="captions-prev-page")
                    self.page_number = gr.Number(1, label="Page", precision=0, minimum=1, scale=0, elem_id="captions-page")
                    self.page_info = gr.Markdown("", elem_id="captions-page-info")
                    self.next_page = gr.Button("Page ▶", scale=0, elem_id="captions-next-page")
            with gr.Column(scale=2):
                self.current = gr.Textbox(label="Image", interactive=False, elem_id="captions-current")
                # a clip plays here (the grid shows its first frame); hidden for an image
                self.clip = gr.Video(label="Clip", interactive=False, visible=False, height=240, elem_id="captions-clip")
                self.editor = gr.Textbox(label="Caption", lines=6, elem_id="captions-editor",
                                         info="One caption per line. Enter saves, Shift+Enter starts a new line; "
                                              "Up on the first line / Down on the last line saves and moves to the previous / next image.")
                with gr.Row():
                    self.prev_img = gr.Button("↑ Previous", elem_id="captions-prev")
                    self.save_btn = gr.Button("Save", variant="primary", elem_id="captions-save")
                    self.next_img = gr.Button("↓ Next", elem_id="captions-next")
        with gr.Accordion("Bulk edit", open=False, elem_id="captions-bulk"):
            with gr.Row():
                self.operation = gr.Dropdown(OPERATION_CHOICES, value="replace", label="Operation", elem_id="captions-op")
                self.find = gr.Textbox(label="Find", elem_id="captions-find")
                self.replace = gr.Textbox(label="Replace with", elem_id="captions-replace")
                self.regex = gr.Checkbox(False, label="Regular expression", info="Python syntax; \\1 in Replace with")
                self.text = gr.Textbox(label="Text or tags", elem_id="captions-text",
                                       info="The prefix or suffix, or comma-separated tags to add or remove.")
            with gr.Row():
                self.scope = gr.Radio([("Whole folder", "folder"), ("Selected images", "selection")], value="folder",
                                      label="Apply to", elem_id="captions-scope")
                self.selection = gr.Dropdown([], value=[], multiselect=True, label="Selected images",
                                             info="Offered from the shown page; kept when you change page.", elem_id="captions-selection")
            with gr.Row():
                self.preview_btn = gr.Button("Preview", elem_id="captions-preview")
                self.apply_btn = gr.Button("Apply", variant="primary", elem_id="captions-apply")
                self.undo_btn = gr.Button("Undo last bulk edit", elem_id="captions-undo")
            self.bulk_status = gr.Markdown("", elem_id="captions-bulk-status")
            self.diff = gr.Dataframe(headers=["image", "before", "after"], value=[], interactive=False, wrap=True, elem_id="captions-diff")
        self._wire()

    # --- wiring --------------------------------------------------------------------------------
    def _wire(self) -> None:
        cfg = self.ctx.config_state
        view_out = [self.view, self.gallery, self.page_number, self.page_info, self.selection, self.current, self.editor, self.clip, self.status]
        self.open_btn.click(self.on_open, [self.folder, self.recursive, self.selection, cfg], view_out)
        self.folder.submit(self.on_open, [self.folder, self.recursive, self.selection, cfg], view_out)
        self.page_number.submit(self.on_page, [self.view, self.page_number, self.selection, cfg], view_out)
        self.prev_page.click(self.on_prev_page, [self.view, self.selection, cfg], view_out)
        self.next_page.click(self.on_next_page, [self.view, self.selection, cfg], view_out)
        self.gallery.select(self._gallery_select, [self.view, cfg], [self.current, self.editor, self.clip, self.status])
        self.save_btn.click(self.on_save, [self.view, self.current, self.editor, cfg], [self.gallery, self.editor, self.status])
        self.prev_img.click(self.on_prev_image, [self.view, self.current, self.editor, self.selection, cfg], view_out)
        self.next_img.click(self.on_next_image, [self.view, self.current, self.editor, self.selection, cfg], view_out)
        self.editor.focus(None, None, None, js=KEYS_JS)
        bulk_in = [self.view, self.operation, self.find, self.replace, self.regex, self.text, self.scope, self.selection, cfg]
        self.preview_btn.click(self.on_preview, bulk_in, [self.bulk_status, self.diff])
        self.apply_btn.click(self.on_apply, [*bulk_in, self.current], [self.bulk_status, self.diff, self.gallery, self.editor])
        self.undo_btn.click(self.on_undo, [self.view, self.current, cfg], [self.bulk_status, self.diff, self.gallery, self.editor])

    # --- helpers -----------------------------------------------------------------------------
    def _root(self, view: dict[str, Any], config: dict[str, Any]) -> Path:
        if not (view or {}).get("folder"):
            raise ToolInputError(f"{FIELD}: open a folder first")
        return self.ctx.folder(FIELD, view["folder"], config)

    def _image(self, root: Path, name: str) -> Path:
        if not name:
            raise ToolInputError("Image: click an image first")
        image = (root / name).resolve()
        if not image.is_relative_to(root) or not image.is_file():
            raise ToolInputError(f"Image: '{name}' is not an image of {root}")
        return image

    def _gallery(self, page) -> list[tuple[str, str]]:
        out = []
        for item in page.items:
            thumb = thumbnail(item.image, self.thumbs) or self._placeholder()
            out.append((str(thumb), _label(item.name, item.caption, item.has_caption)))
        return out

    def _clip_update(self, path: Path | None) -> dict:
        """The clip player: shown with the clip when `path` is one, hidden otherwise. The clip is
        played from a copy in gradio's cache (the folder was confined by the caller): the page
        serves no dataset folder itself."""
        try:
            if path is not None and path.suffix.lower() in PLAYED_CLIPS and path.stat().st_size <= MAX_PLAYED_CLIP:
                cached = self.clip.move_resource_to_block_cache(str(path))
                if cached:
                    return gr.update(value=cached, visible=True)
        except (OSError, ValueError):
            pass
        return gr.update(value=None, visible=False)

    def _placeholder(self) -> Path:
        path = self.thumbs / "unreadable.png"
        if not path.is_file():
            from PIL import Image  # noqa: PLC0415

            from ..fsutil import atomic_write  # noqa: PLC0415

            atomic_write(path, lambda tmp: Image.new("RGB", (64, 64), (200, 200, 200)).save(tmp, format="PNG"))
        return path

    def _render(self, root: Path, recursive: bool, page: int, selected: list[str] | None, pick: int | None = 0) -> dict:
        """Every view output for `page`; `pick` is the index (negative from the end) of the image to edit."""
        shown = page_of(root, page, PAGE_SIZE, recursive)
        names = [item.name for item in shown.items]
        selected = [s for s in (selected or []) if s]
        view = {"folder": str(root), "recursive": bool(recursive), "page": shown.page, "names": names}
        last = core.last_operation(root)
        out = {
            self.view: view,
            self.gallery: self._gallery(shown),
            self.page_number: shown.page,
            self.page_info: f"page {shown.page} of {shown.pages} · {shown.total} images" + (f" · last bulk edit: {last}" if last else ""),
            self.selection: gr.update(choices=list(dict.fromkeys(selected + names)), value=selected),
            self.status: "",
        }
        item = shown.items[pick] if shown.items and pick is not None and -len(names) <= pick < len(names) else None
        out[self.current] = item.name if item else ""
        out[self.editor] = item.caption if item else ""
        out[self.clip] = self._clip_update(item.image if item else None)
        return out

    def _refused(self, err: Exception, outputs: list) -> dict:
        return {**{c: gr.update() for c in outputs}, outputs[-1]: f"**refused** {err}"}

    # --- browsing and editing ------------------------------------------------------------------
    def on_open(self, folder: str, recursive: bool, selected: list[str] | None, config: dict[str, Any]) -> dict:
        try:
            value = folder if str(folder or "").strip() else next(iter(self.ctx.concept_folders(config)), "")
            root = self.ctx.folder(FIELD, value, config)
            out = self._render(root, recursive, 1, [])  # a new folder: the old selection means nothing
        except (ToolInputError, CaptionError) as err:
            return self._refused(err, [self.view, self.status])
        if not out[self.view]["names"]:
            out[self.status] = f"no images in {root}"
        elif note := self.ctx.captions_file_note(root, config):
            out[self.status] = f"**Note:** {note}: edits here are saved to .txt files it does not read."
        return out

    def on_page(self, view: dict[str, Any], page: float | int, selected: list[str] | None, config: dict[str, Any]) -> dict:
        try:
            root = self._root(view, config)
            return self._render(root, view.get("recursive", False), int(page or 1), selected)
        except (ToolInputError, CaptionError) as err:
            return self._refused(err, [self.view, self.status])

    def on_prev_page(self, view: dict[str, Any], selected: list[str] | None, config: dict[str, Any]) -> dict:
        return self.on_page(view, int((view or {}).get("page", 1)) - 1, selected, config)

    def on_next_page(self, view: dict[str, Any], selected: list[str] | None, config: dict[str, Any]) -> dict:
        return self.on_page(view, int((view or {}).get("page", 1)) + 1, selected, config)

    def on_select(self, view: dict[str, Any], index: int, config: dict[str, Any]) -> dict:
        try:
            root = self._root(view, config)
            names = view.get("names") or []
            if not 0 <= int(index) < len(names):
                raise ToolInputError("Image: that image is not on this page any more; open the folder again")
            image = self._image(root, names[int(index)])
            return {self.current: names[int(index)], self.editor: read_caption(image), self.clip: self._clip_update(image), self.status: ""}
        except (ToolInputError, CaptionError) as err:
            return self._refused(err, [self.current, self.editor, self.clip, self.status])

    def _gallery_select(self, view: dict[str, Any], config: dict[str, Any], evt: gr.SelectData) -> dict:
        return self.on_select(view, evt.index, config)

    def _save(self, root: Path, name: str, text: str) -> tuple[bool, str]:
        image = self._image(root, name)
        changed = core.write_caption(image, text)
        return changed, f"saved {caption_file(image).name}" if changed else f"{caption_file(image).name} unchanged"

    def on_save(self, view: dict[str, Any], current: str, text: str, config: dict[str, Any]) -> dict:
        try:
            root = self._root(view, config)
            _, message = self._save(root, current, text)
            shown = page_of(root, view.get("page", 1), PAGE_SIZE, view.get("recursive", False))
            return {self.gallery: self._gallery(shown), self.editor: normalize(text), self.status: message}
        except (ToolInputError, CaptionError, OSError) as err:
            return self._refused(err, [self.gallery, self.editor, self.status])

    def on_move(self, view: dict[str, Any], current: str, text: str, delta: int, selected: list[str] | None, config: dict[str, Any]) -> dict:
        """Save the shown caption if it was edited, then show the previous (-1) or next (+1) image,
        turning the page at its ends."""
        outputs = [self.view, self.gallery, self.page_number, self.page_info, self.selection, self.current, self.editor, self.clip, self.status]
        try:
            root = self._root(view, config)
            message = ""
            if current:
                image = self._image(root, current)
                if normalize(text) != normalize(read_caption(image)):
                    message = self._save(root, current, text)[1]
            names = view.get("names") or []
            index = names.index(current) + delta if current in names else 0
            page = int(view.get("page", 1))
            if index < 0:
                page, pick = page - 1, -1
            elif index >= len(names):
                page, pick = page + 1, 0
            else:
                pick = index
            out = self._render(root, view.get("recursive", False), page, selected, pick)
            if out[self.view]["page"] != page:  # past the first or last image: stay where we were
                out = self._render(root, view.get("recursive", False), int(view.get("page", 1)), selected, min(max(index, 0), len(names) - 1))
            out[self.status] = message
            return out
        except (ToolInputError, CaptionError, OSError) as err:
            return self._refused(err, outputs)

    def on_prev_image(self, view: dict[str, Any], current: str, text: str, selected: list[str] | None, config: dict[str, Any]) -> dict:
        return self.on_move(view, current, text, -1, selected, config)

    def on_next_image(self, view: dict[str, Any], current: str, text: str, selected: list[str] | None, config: dict[str, Any]) -> dict:
        return self.on_move(view, current, text, 1, selected, config)

    # --- bulk edits ------------------------------------------------------------------------------
    def _op(self, view: dict[str, Any], operation: str, find: str, replace: str, regex: bool, text: str, scope: str,
            selected: list[str] | None) -> BulkOp:
        files = None
        if scope == "selection":
            files = [s for s in (selected or []) if s]
            if not files:
                raise ToolInputError("Selected images: pick one or more images, or apply to the whole folder")
        return BulkOp(operation or "replace", find=find or "", replace=replace or "", regex=bool(regex), text=text or "",
                      files=files, recursive=bool(view.get("recursive", False)))

    @staticmethod
    def _rows(changes) -> list[list[str]]:
        return [[c.name, "(no caption file)" if c.before is None else c.before, c.after] for c in changes[:DIFF_ROWS]]

    def on_preview(self, view, operation, find, replace, regex, text, scope, selected, config) -> dict:
        try:
            root = self._root(view, config)
            changes = core.preview(root, self._op(view, operation, find, replace, regex, text, scope, selected))
        except (ToolInputError, CaptionError) as err:
            return {self.bulk_status: f"**refused** {err}", self.diff: []}
        more = f" (first {DIFF_ROWS} shown)" if len(changes) > DIFF_ROWS else ""
        return {self.bulk_status: f"**{len(changes)} files change**{more}", self.diff: self._rows(changes)}

    def on_apply(self, view, operation, find, replace, regex, text, scope, selected, config, current: str = "") -> dict:
        try:
            root = self._root(view, config)
            changes = core.apply(root, self._op(view, operation, find, replace, regex, text, scope, selected))
        except (ToolInputError, CaptionError, OSError) as err:
            return {self.bulk_status: f"**refused** {err}", self.diff: [], self.gallery: gr.update(), self.editor: gr.update()}
        note = " — Undo last bulk edit puts them back" if changes else ""
        return {self.bulk_status: f"**{len(changes)} files changed**{note}", self.diff: self._rows(changes), **self._reload(root, view, current)}

    def on_undo(self, view: dict[str, Any], current: str, config: dict[str, Any]) -> dict:
        try:
            root = self._root(view, config)
            operation, restored = core.undo_last(root)
        except (ToolInputError, CaptionError, OSError) as err:
            return {self.bulk_status: f"**refused** {err}", self.diff: [], self.gallery: gr.update(), self.editor: gr.update()}
        return {self.bulk_status: f"**undone** {operation}: {len(restored)} caption files restored", self.diff: [], **self._reload(root, view, current)}

    def _reload(self, root: Path, view: dict[str, Any], current: str) -> dict:
        shown = page_of(root, view.get("page", 1), PAGE_SIZE, view.get("recursive", False))
        editor = gr.update()
        if current:
            try:
                editor = read_caption(self._image(root, current))
            except ToolInputError:
                pass
        return {self.gallery: self._gallery(shown), self.editor: editor}
