"""Tools > Convert: checkpoint folder <-> single file (and dtype), LoRA kohya <-> diffusers keys,
and merging a LoRA into a checkpoint. The work runs as the "convert" job (tools/convert.py);
this module only builds the form, checks its paths and shows the result. No torch here."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..config.families import implemented_model_types
from ..config.hub_files import downloads_file, downloads_model
from .job_panel import JobPanel
from .tools_tab import ToolInputError

OPERATIONS = ("checkpoint", "LoRA", "merge")
# operation -> the fields it shows
SHOWN = {
    "checkpoint": ("input", "config", "fmt", "dtype"),
    "LoRA": ("input", "base", "to"),
    "merge": ("base", "lora", "config", "weight", "fmt", "dtype"),
}
HELP = {
    "checkpoint": "Load a base model (diffusers folder, single file or Hugging Face id) and save it as a diffusers folder "
                  "or a single `.safetensors` file, in the chosen dtype.",
    "LoRA": "Rewrite a LoRA file with kohya keys (A1111, Forge, ComfyUI) or diffusers/PEFT keys; rank, alpha and metadata are kept, "
            "so the LoRA has the same effect.",
    "merge": "Bake a LoRA (either key format) into a base model at the given weight and save the merged model.",
}


def _looks_like_hub_id(value: str) -> bool:
    """A Hugging Face id, or an address of a model that downloads (Hugging Face, Civitai)."""
    parts = value.strip().split("/")
    if downloads_model(value):
        return True
    return (len(parts) == 2 and all(parts) and not value.strip().startswith((".", "~", "/"))
            and not value.strip().lower().endswith((".safetensors", ".ckpt")))


def format_size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


class ConvertTool:
    def __init__(self, ctx):
        self.ctx = ctx
        with gr.Row():
            self.operation = gr.Radio(list(OPERATIONS), value="checkpoint", label="Operation", elem_id="convert-operation")
            types = [t.value for t in implemented_model_types()]
            self.model_type = gr.Dropdown(types, value=types[0] if types else None, label="Model type", elem_id="convert-model-type")
        self.help = gr.Markdown(HELP["checkpoint"], elem_id="convert-help")
        self.fields: dict[str, gr.components.Component] = {
            "input": gr.Textbox(label="Input", info="Checkpoint: diffusers folder, .safetensors file or Hugging Face id. LoRA: the LoRA file, or a Hugging "
                                     "Face file's or Civitai LoRA's address.",
                                elem_id="convert-input"),
            "base": gr.Textbox(label="Base model", visible=False, elem_id="convert-base",
                               info="Merge: the model to merge into. LoRA (SDXL only, optional): the base whose UNet names kohya layers."),
            "lora": gr.Textbox(label="LoRA file", visible=False, elem_id="convert-lora",
                               info="a file, or a Hugging Face file's or Civitai LoRA's address (downloaded once)"),
            "config": gr.Textbox(label="Config folder", elem_id="convert-config",
                                 info="Only for a single-file input: a diffusers folder of the same model type (its configs)."),
            "output": gr.Textbox(label="Output", info="A folder for diffusers, a .safetensors file otherwise.", elem_id="convert-output"),
            "fmt": gr.Radio(["diffusers", "single"], value="single", label="Output format", elem_id="convert-format"),
            "dtype": gr.Dropdown(["float32", "float16", "bfloat16"], value="float16", label="Output dtype", elem_id="convert-dtype"),
            "to": gr.Radio(["kohya", "diffusers"], value="kohya", label="Convert to", visible=False, elem_id="convert-to"),
            "weight": gr.Number(value=1.0, label="LoRA weight", visible=False, elem_id="convert-weight"),
        }
        self.start_button = gr.Button("Start", variant="primary", elem_id="convert-start")
        self.panel = JobPanel(ctx.jobs, "convert")
        self.result = gr.Markdown("", elem_id="convert-result")
        self.panel.wire(self.render, [self.result])
        self.operation.change(self.show, [self.operation], [self.help, *self.fields.values()])
        inputs = {ctx.config_state, self.operation, self.model_type, *self.fields.values()}
        self.start_button.click(self.start_from_form, inputs, self.panel.launch_outputs)

    def show(self, operation: str) -> list:
        shown = SHOWN.get(operation, ())
        always = ("output",)
        return [HELP.get(operation, ""), *[gr.update(visible=name in shown or name in always) for name in self.fields]]

    def start_from_form(self, values: dict) -> tuple:
        """Gradio passes the form as {component: value}."""
        named = {name: values.get(comp) for name, comp in self.fields.items()}
        named.update(operation=values.get(self.operation), model_type=values.get(self.model_type))
        return self.start(values.get(self.ctx.config_state) or {}, named)

    def start(self, config: dict[str, Any], form: dict[str, Any]) -> tuple:
        try:
            params = self.params(config, form)
        except ToolInputError as err:
            return self.panel.refused(str(err))
        return self.panel.launch("convert", params)

    def params(self, config: dict[str, Any], form: dict[str, Any]) -> dict[str, Any]:
        """The job's params from the form; paths checked against the page's folders."""
        operation = str(form.get("operation") or "checkpoint")
        if operation not in SHOWN:
            raise ToolInputError(f"Operation: '{operation}' is not one of {', '.join(OPERATIONS)}")
        if not form.get("model_type"):
            raise ToolInputError("Model type: pick one")
        params: dict[str, Any] = {"operation": "lora" if operation == "LoRA" else operation, "model_type": form["model_type"]}
        shown = SHOWN[operation]
        model_ok = operation != "LoRA"
        if "input" in shown:
            params["input"] = self._source("Input", form.get("input"), config, hub_id_ok=model_ok, lora_ok=not model_ok)
        if "base" in shown and (operation == "merge" or str(form.get("base") or "").strip()):
            params["base"] = self._source("Base model", form.get("base"), config, hub_id_ok=True)
        if "lora" in shown:
            params["lora"] = self._source("LoRA file", form.get("lora"), config, hub_id_ok=False, lora_ok=True)
        if "config" in shown and str(form.get("config") or "").strip():
            params["config"] = str(self.ctx.folder("Config folder", str(form["config"]), config))
        params["output"] = str(self.ctx.output("Output", str(form.get("output") or ""), config))
        params["workspace"] = str(self.ctx.workspace)  # a model that downloads does so with the page's tokens
        if "fmt" in shown:
            params["format"], params["dtype"] = form.get("fmt") or "single", form.get("dtype") or "float32"
        if "to" in shown:
            params["to"] = form.get("to") or "kohya"
        if "weight" in shown:
            params["weight"] = float(form.get("weight") if form.get("weight") is not None else 1.0)
        return params

    def _source(self, field: str, value: Any, config: dict[str, Any], hub_id_ok: bool, lora_ok: bool = False) -> str:
        """A file or folder inside the page's folders; or, where allowed, a model that downloads
        (`hub_id_ok`) or a LoRA's Hugging Face file or Civitai address (`lora_ok`), fetched by the job."""
        value = str(value or "").strip()
        if lora_ok and downloads_file(value):
            return value
        try:
            return str(self.ctx.file(field, value, config))
        except ToolInputError:
            if hub_id_ok and _looks_like_hub_id(value):
                return value
            raise

    @staticmethod
    def render(result: dict[str, Any] | None) -> tuple:
        if not result:
            return ("",)
        return (f"**Written:** `{result['output']}` ({format_size(int(result.get('size_bytes', 0)))})",)
