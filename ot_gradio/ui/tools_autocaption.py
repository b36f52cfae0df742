"""Tools > Auto caption: the form for the "autocaption" job (BLIP, BLIP-2, WD14, JoyCaption,
Qwen2.5-VL) and Start.

The model runs in a worker process through a JobPanel (progress bar, Cancel keeps what is
done); the page never loads it. The form is checked here first: the folder (and a model path
that is a local folder) must lie inside the page's folders, so a typo or a path elsewhere is
named before anything starts. Torch-free: the registry module imports its models lazily."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from ..tools.autocaption import CAPTIONERS, MODES, looks_local
from ..tools.vlm_caption import ChatCaptioner
from .job_panel import JobPanel
from .tools_tab import ToolInputError, ToolsContext, launch_checked

MODE_LABELS = {"replace": "replace all", "missing": "create if absent", "add": "add as new line"}


def _number(value: Any, default: float) -> float:
    return default if value is None or value == "" else float(value)


def _whole(label: str, value: Any, default: int, least: int) -> int:
    number = int(_number(value, default))
    if number < least:
        raise ToolInputError(f"{label}: {number} is less than {least}")
    return number


class AutoCaptionTool:
    def __init__(self, ctx: ToolsContext):
        self.ctx = ctx
        gr.Markdown("Write `<image>.txt` captions automatically. A caption that is replaced or added to is first backed up "
                    "to `.ot_captions/backup/` next to it (the caption editor's backups).")
        self.folder, self.subfolders = ctx.folder_picker("autocaption")
        with gr.Row():
            self.model = gr.Dropdown(label="Model", choices=[(cls.label, name) for name, cls in CAPTIONERS.items()], value="blip",
                                     elem_id="autocaption-model")
            self.model_path = gr.Textbox(label="Model path", value="", placeholder=CAPTIONERS["blip"].default_path, scale=2,
                                         info="hub id or local folder; empty: the placeholder (BLIP, BLIP-2, WD14: OneTrainer's)",
                                         elem_id="autocaption-model-path")
            self.device = gr.Dropdown(label="Device", choices=["auto", "cpu", "cuda"], value="auto", elem_id="autocaption-device")
        with gr.Row():
            self.mode = gr.Dropdown(label="Mode", choices=[(MODE_LABELS[m], m) for m in MODES], value="missing", elem_id="autocaption-mode")
            self.initial = gr.Textbox(label="Initial caption", value="", elem_id="autocaption-initial",
                                      info="BLIP/BLIP-2: the text the model continues, e.g. 'a photo of'; the others: put before the caption")
        with gr.Row():
            self.prefix = gr.Textbox(label="Caption prefix", value="", elem_id="autocaption-prefix", info="added before each caption, as typed")
            self.postfix = gr.Textbox(label="Caption postfix", value="", elem_id="autocaption-postfix", info="added after each caption, as typed")
        with gr.Row(visible=False) as self.chat_row:
            self.instruction = gr.Textbox(label="Instruction", value="", scale=3, elem_id="autocaption-instruction",
                                          placeholder=ChatCaptioner.instruction,
                                          info="what the model is asked for the caption; empty: the placeholder (the model's own)")
            self.max_tokens = gr.Number(label="Max new tokens", value=512, precision=0, minimum=1, elem_id="autocaption-max-tokens",
                                        info="the caption's length limit; a caption ends there")
            self.seed = gr.Number(label="Seed", value=42, precision=0, elem_id="autocaption-seed",
                                  info="sampled at temperature 0.6; the same seed writes the same captions")
        with gr.Row(visible=False) as self.threshold_row:
            self.general = gr.Slider(0.0, 1.0, value=0.35, step=0.01, label="General tag threshold", elem_id="autocaption-general")
            self.character = gr.Slider(0.0, 1.0, value=0.85, step=0.01, label="Character tag threshold", elem_id="autocaption-character")
        self.start_button = gr.Button("Start", variant="primary", elem_id="autocaption-start")
        self.summary = gr.Markdown("", elem_id="autocaption-summary")
        self.panel = JobPanel(ctx.jobs, "autocaption", self.render_result, [self.summary])
        self.panel.wire()

        self.inputs = {self.folder, self.subfolders, self.model, self.model_path, self.device, self.mode, self.initial,
                       self.prefix, self.postfix, self.general, self.character, self.instruction, self.max_tokens, self.seed,
                       ctx.config_state}
        self.start_button.click(self.on_start, self.inputs, self.panel.launch_outputs)
        self.model.change(self.on_model, [self.model], [self.threshold_row, self.model_path, self.chat_row, self.instruction])

    @staticmethod
    def on_model(model: str) -> tuple:
        cls = CAPTIONERS.get(model or "blip", CAPTIONERS["blip"])
        chat = issubclass(cls, ChatCaptioner)
        return (gr.update(visible=model == "wd14"), gr.update(placeholder=cls.default_path), gr.update(visible=chat),
                gr.update(placeholder=cls.instruction) if chat else gr.update())

    def params(self, values: dict[Any, Any]) -> dict[str, Any]:
        """Form values -> job params; raises ToolInputError naming the field."""
        config = values.get(self.ctx.config_state) or {}
        folder = self.ctx.folder("Folder", str(values.get(self.folder) or ""), config)
        if note := self.ctx.captions_file_note(folder, config):
            raise ToolInputError(f"Folder: {note}, so the captions written here would not train; clear its Captions file "
                                 "(Concepts tab, Text) first, or caption another folder")
        model = str(values.get(self.model) or "blip")
        if model not in CAPTIONERS:
            raise ToolInputError(f"Model: '{model}' is not one of {', '.join(CAPTIONERS)}")
        model_path = str(values.get(self.model_path) or "").strip()
        if model_path and looks_local(model_path):  # a hub id is not a path; a folder must be one the page may read
            model_path = str(self.ctx.folder("Model path", model_path, config))
        mode = str(values.get(self.mode) or "missing")
        if mode not in MODES:
            raise ToolInputError(f"Mode: '{mode}' is not one of {', '.join(MODES)}")
        return {
            "folder": str(folder), "model": model, "model_path": model_path or CAPTIONERS[model].default_path, "mode": mode,
            "initial_caption": str(values.get(self.initial) or ""), "prefix": str(values.get(self.prefix) or ""),
            "postfix": str(values.get(self.postfix) or ""), "include_subfolders": bool(values.get(self.subfolders)),
            "general_threshold": _number(values.get(self.general), 0.35), "character_threshold": _number(values.get(self.character), 0.85),
            "device": str(values.get(self.device) or "auto"), "instruction": str(values.get(self.instruction) or "").strip(),
            "max_new_tokens": _whole("Max new tokens", values.get(self.max_tokens), 512, 1),
            "seed": _whole("Seed", values.get(self.seed), 42, 0),
        }

    def on_start(self, values: dict[Any, Any]) -> tuple:
        return launch_checked(self.panel, "autocaption", lambda: self.params(values))

    @staticmethod
    def render_result(result: dict[str, Any] | None) -> tuple:
        if not result:
            return ("",)
        lines = [f"**{result.get('message', '')}**", f"{result.get('total', 0)} images in `{Path(str(result.get('folder', ''))).name}`, "
                 f"model {result.get('model', '')}, mode {MODE_LABELS.get(str(result.get('mode')), result.get('mode'))}"]
        lines += [f"- failed: `{name}`" for name in (result.get("failed_files") or [])[:50]]
        return ("\n\n".join(lines[:2]) + ("\n\n" + "\n".join(lines[2:]) if lines[2:] else ""),)
