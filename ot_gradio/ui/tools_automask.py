"""Tools > Auto mask: the form for the "automask" job, a Preview that shows overlays of the
first images (written under the workspace, never into the dataset) and Start.

Both buttons run the job in a worker process through one JobPanel (the model is loaded there,
never in the page). The form is checked here first, so a typo is named before anything starts."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import gradio as gr

from ..tools.automask import CLIPSEG_HUB_ID, MASKERS, MODES, U2NET_FILE, JobError, parse_options
from .job_panel import JobPanel
from .tools_tab import ToolInputError, ToolsContext, launch_checked

MODE_LABELS = {
    "fill": "create if absent", "replace": "replace all", "add": "add", "subtract": "subtract", "blend": "blend",
}
PATH_PREFIXES = ("/", "~", ".", "\\")


class AutoMaskTool:
    def __init__(self, ctx: ToolsContext):
        self.ctx = ctx
        gr.Markdown("Make `<image>-masklabel.png` masks automatically (white = train on it). "
                    "A mask that is overwritten is kept as `<mask>.bak`. Preview first: it writes nothing in the dataset.")
        self.folder, self.subfolders = ctx.folder_picker("automask")
        with gr.Row():
            self.model = gr.Dropdown(label="Model", choices=[(spec.label, name) for name, spec in MASKERS.items()],
                                     value="clipseg", elem_id="automask-model")
            self.model_path = gr.Textbox(label="Model path", value="", elem_id="automask-model-path",
                                         placeholder=f"empty: {CLIPSEG_HUB_ID} (ClipSeg) or ~/.u2net/{U2NET_FILE} (rembg)",
                                         info="hub id or local folder (ClipSeg); .onnx file or its folder (rembg)")
            self.device = gr.Dropdown(label="Device", choices=["auto", "cpu", "cuda"], value="auto", elem_id="automask-device")
        with gr.Row():
            self.prompt = gr.Textbox(label="Prompt", value="", elem_id="automask-prompt", info="ClipSeg: e.g. 'person, dog'")
            self.colour = gr.Textbox(label="Colour", value="", elem_id="automask-colour", info="by colour: e.g. #00ff00 or 0,255,0")
        with gr.Row():
            self.threshold = gr.Slider(0.0, 1.0, value=0.3, step=0.01, label="Threshold", elem_id="automask-threshold",
                                       info="keep scores above it; by colour: how close a colour counts")
            self.smoothing = gr.Number(value=5, precision=0, minimum=0, label="Smoothing (px)", elem_id="automask-smoothing")
            self.expansion = gr.Number(value=10, precision=0, minimum=0, label="Expansion (px)", elem_id="automask-expansion")
            self.alpha = gr.Slider(0.0, 1.0, value=1.0, step=0.05, label="Alpha", elem_id="automask-alpha",
                                   info="strength of the new mask (blend: its weight)")
        with gr.Row():
            self.mode = gr.Dropdown(label="Mode", choices=[(MODE_LABELS[m], m) for m in MODES], value="fill", elem_id="automask-mode")
            self.invert = gr.Checkbox(label="Invert (mask all but what is found)", value=False, elem_id="automask-invert")
            self.download = gr.Checkbox(label=f"Allow downloading {U2NET_FILE}", value=False, elem_id="automask-download")
        with gr.Row():
            self.preview_button = gr.Button("Preview", elem_id="automask-preview")
            self.start_button = gr.Button("Start", variant="primary", elem_id="automask-start")
        self.gallery = gr.Gallery(interactive=False, label="Preview (red = not trained on)", columns=4, height="auto", elem_id="automask-gallery")
        self.summary = gr.Markdown("", elem_id="automask-summary")
        self.panel = JobPanel(ctx.jobs, "automask", self.render_result, [self.gallery, self.summary])
        self.panel.wire()

        self.inputs = {self.folder, self.subfolders, self.model, self.model_path, self.device, self.prompt, self.colour,
                       self.threshold, self.smoothing, self.expansion, self.alpha, self.mode, self.invert, self.download,
                       ctx.config_state}
        self.preview_button.click(self.on_preview, self.inputs, self.panel.launch_outputs)
        self.start_button.click(self.on_start, self.inputs, self.panel.launch_outputs)

    def params(self, values: dict[Any, Any]) -> dict[str, Any]:
        """Form values -> job params, with every path checked against the page's folders.
        Raises ToolInputError naming the field."""
        config = values.get(self.ctx.config_state) or {}
        folder = self.ctx.folder("Folder", str(values.get(self.folder) or ""), config)
        model_path = str(values.get(self.model_path) or "").strip()
        if model_path and (model_path.startswith(PATH_PREFIXES) or Path(model_path).expanduser().exists()):
            model_path = str(self.ctx.file("Model path", model_path, config))
        params = {
            "folder": str(folder), "model": values.get(self.model) or "clipseg", "model_path": model_path,
            "prompt": values.get(self.prompt) or "", "colour": values.get(self.colour) or "",
            "threshold": values.get(self.threshold), "smoothing": values.get(self.smoothing),
            "expansion": values.get(self.expansion), "alpha": values.get(self.alpha), "mode": values.get(self.mode) or "fill",
            "include_subfolders": bool(values.get(self.subfolders)), "invert": bool(values.get(self.invert)),
            "device": values.get(self.device) or "auto", "allow_download": bool(values.get(self.download)),
        }
        try:
            parse_options(params)
        except JobError as err:
            raise ToolInputError(str(err)) from None
        return params

    def on_preview(self, values: dict[Any, Any]) -> tuple:
        out_dir = self.ctx.workspace / "previews" / "automask" / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        return launch_checked(self.panel, "automask", lambda: {**self.params(values), "preview": True, "preview_dir": str(out_dir)})

    def on_start(self, values: dict[Any, Any]) -> tuple:
        return launch_checked(self.panel, "automask", lambda: self.params(values))

    @staticmethod
    def render_result(result: dict[str, Any] | None) -> tuple:
        if not result:
            return gr.update(), ""
        if "preview" in result:
            return gr.update(value=[(path, Path(path).stem.removesuffix("-overlay")) for path in result["preview"]]), result["message"]
        failed = result.get("failed") or []
        lines = [f"**{result.get('message', '')}**"] + [f"- failed: `{name}`" for name in failed[:50]]
        return gr.update(), "\n".join(lines)
