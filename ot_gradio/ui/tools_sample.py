"""The Sample tool: generate images on demand with a base model, a LoRA, an embedding or the last
backup of a run. The form is checked here (paths inside the page's folders, numbers in range);
the model loads and samples in a worker process (tools/sample.py), with progress and Cancel."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gradio as gr

from ..config.enums import NoiseScheduler
from ..config.families import family_info, implemented_model_types
from ..config.hub_files import downloads_file, downloads_model
from ..fsutil import BACKUP_MARKER
from ..runner.history import run_config, trusted_output
from ..runner.rundir import list_runs, runs_root
from .job_panel import JobPanel
from .tools_tab import ToolInputError, ToolsContext, launch_checked

NO_RUN = ""
# a run's output goes into this field of the Sample form, by its training method
TRAINED_FIELD = {"LORA": "lora", "EMBEDDING": "embedding", "FINE_TUNE": "base_model"}
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def runs_with_backup(workspace: Path) -> list[tuple[str, str]]:
    """(label, run folder) of the workspace's runs that have a complete backup, newest first."""
    found = []
    for run in reversed(list_runs(workspace)):
        backups = [b for b in run.backup.glob("*") if b.is_dir() and (b / BACKUP_MARKER).exists()] if run.backup.is_dir() else []
        if backups:
            found.append((f"{run.run_id} ({len(backups)} backup{'s' if len(backups) > 1 else ''})", str(run.path)))
    return found


def run_choices(workspace: Path) -> list[tuple[str, str]]:
    return [("none", NO_RUN), *runs_with_backup(workspace)]


def trained_choices(workspace: Path) -> list[tuple[str, str]]:
    """("none", "") and (label, run folder) of the workspace's runs whose output file is there, newest first."""
    found = []
    for run in reversed(list_runs(workspace)):
        config = run_config(run)
        output = trusted_output(run, workspace, config)
        if output and config.get("training_method") in TRAINED_FIELD:
            found.append((f"{Path(output).name} ({config['training_method']}, {run.run_id})", str(run.path)))
    return [("none", NO_RUN), *found]


def trained_fields(workspace: Path, run: str) -> dict[str, str] | None:
    """The Sample form's model type, base model, LoRA and embedding for run folder `run`'s output
    (a fine-tune's output is the base model); None when it is not one of trained_choices."""
    if not run or Path(run).parent.resolve() != runs_root(workspace).resolve() or not Path(run).is_dir():
        return None
    config = run_config(Path(run))
    output = trusted_output(Path(run), workspace, config)
    if not output or config.get("training_method") not in TRAINED_FIELD:
        return None
    fields = {"model_type": str(config["model_type"]), "base_model": str(config.get("base_model_name") or ""), "lora": "", "embedding": ""}
    fields[TRAINED_FIELD[config["training_method"]]] = output
    return fields


def is_model_id(value: str) -> bool:
    """A hub id or a tiny test model, not a path (those are checked against the page's folders)."""
    return (value.startswith("tiny:") or (_HUB_ID.fullmatch(value) is not None and not Path(value).exists())
            or downloads_model(value))  # a Hugging Face or Civitai address


class SampleTool:
    def __init__(self, ctx: ToolsContext):
        self.ctx = ctx
        config = ctx.config
        model_types = [t.value for t in implemented_model_types()]
        with gr.Row():
            self.model_type = gr.Dropdown(model_types, value=config.get("model_type") or model_types[0], label="Model type",
                                          elem_id="tool-sample-model-type")
            self.base_model = gr.Textbox(value=config.get("base_model_name") or "", label="Base model",
                                         info="Hugging Face id or address, Civitai model's address, diffusers folder or .safetensors file",
                                         elem_id="tool-sample-base-model")
            self.from_config = gr.Button("Use the training tab's model", scale=0, elem_id="tool-sample-from-config")
        with gr.Row():
            self.lora = gr.Textbox(label="LoRA file",
                                   info="optional kohya or diffusers LoRA: a file, or a Hugging Face file's or Civitai LoRA's address", elem_id="tool-sample-lora")
            self.lora_weight = gr.Number(1.0, label="LoRA weight", minimum=-10, maximum=10, step=0.05, elem_id="tool-sample-lora-weight")
            self.embedding = gr.Textbox(label="Embedding file", info="optional A1111 embedding: a file, or a Hugging Face file's or Civitai embedding's address",
                                        elem_id="tool-sample-embedding")
            self.token = gr.Textbox(label="Embedding token", info="the text that triggers it (blank = its placeholder or file name)",
                                    elem_id="tool-sample-token")
        with gr.Row():
            self.run = gr.Dropdown(run_choices(ctx.workspace), value=NO_RUN, label="Run (its last backup)",
                                   info="replaces the base model and LoRA with the run's", elem_id="tool-sample-run")
            self.trained = gr.Dropdown(trained_choices(ctx.workspace), value=NO_RUN, label="A run's output file",
                                       info="fills in the model type, base model and LoRA or embedding file of a run's saved output",
                                       elem_id="tool-sample-trained")
            self.refresh = gr.Button("Refresh runs", scale=0, elem_id="tool-sample-refresh")
        samples = [s for s in config.get("samples") or [] if isinstance(s, dict) and str(s.get("prompt") or "").strip()]
        first = samples[0] if samples else {}
        self.prompts = gr.Textbox("\n".join(s["prompt"] for s in samples), lines=4, label="Prompts (one per line)",
                                  info="starts with the training config's sample prompts", elem_id="tool-sample-prompts")
        self.negative = gr.Textbox(first.get("negative_prompt") or "", label="Negative prompt", elem_id="tool-sample-negative")
        self.control = gr.Textbox(first.get("control_image") or "", label="Control image",
                                  info="QWEN_IMAGE_EDIT: the image every prompt edits; WAN_2_1_I2V, WAN_2_2_I2V_A14B, WAN_2_2_TI2V_5B and LTX_2: the image "
                                  "(or a clip's first frame) the video starts from (TI2V 5B and LTX-2: blank samples from the prompt alone)", elem_id="tool-sample-control")
        with gr.Row():
            self.width = gr.Number(first.get("width") or 512, label="Width", precision=0, minimum=16, maximum=4096, elem_id="tool-sample-width")
            self.height = gr.Number(first.get("height") or 512, label="Height", precision=0, minimum=16, maximum=4096, elem_id="tool-sample-height")
            self.steps = gr.Number(20, label="Steps", precision=0, minimum=1, maximum=1000, elem_id="tool-sample-steps")
            self.cfg = gr.Number(7.0, label="CFG scale", minimum=0, maximum=50, elem_id="tool-sample-cfg")
            self.seed = gr.Number(42, label="Seed (-1 = random)", precision=0, elem_id="tool-sample-seed")
            self.sampler = gr.Dropdown([s.value for s in NoiseScheduler], value=NoiseScheduler.DDIM.value, label="Sampler",
                                       elem_id="tool-sample-sampler")
        self.generate = gr.Button("Generate", variant="primary", elem_id="tool-sample-generate")
        self.gallery = gr.Gallery(interactive=False, label="Images", columns=4, object_fit="scale-down",  # whole, not cropped
                                  elem_id="tool-sample-gallery")
        self.panel = JobPanel(ctx.jobs, "tool-sample", self.render_result, [self.gallery])
        self.inputs = {ctx.config_state, self.model_type, self.base_model, self.lora, self.lora_weight, self.embedding, self.token,
                       self.run, self.prompts, self.negative, self.control, self.width, self.height, self.steps, self.cfg, self.seed, self.sampler}
        self.generate.click(self.on_generate, self.inputs, self.panel.launch_outputs)
        self.refresh.click(self.on_refresh, None, [self.run, self.trained])
        self.trained.input(self.on_trained, self.trained, [self.model_type, self.base_model, self.lora, self.embedding, self.run])
        self.from_config.click(self.on_from_config, ctx.config_state, [self.model_type, self.base_model])
        self.panel.wire()

    # ---------------------------------------------------------------- handlers

    def on_refresh(self) -> tuple:
        return gr.update(choices=run_choices(self.ctx.workspace)), gr.update(choices=trained_choices(self.ctx.workspace))

    def on_trained(self, run: str) -> tuple:
        fields = trained_fields(self.ctx.workspace, str(run or ""))
        if fields is None:
            return (gr.skip(),) * 5
        # the run's output, not its backup: the Run choice is cleared
        return (gr.update(value=fields["model_type"]), fields["base_model"], fields["lora"], fields["embedding"], NO_RUN)

    def on_from_config(self, config: dict[str, Any]) -> tuple:
        config = config or {}
        return gr.update(value=config.get("model_type")), gr.update(value=config.get("base_model_name") or "")

    def on_generate(self, values: dict[Any, Any]) -> tuple:
        return launch_checked(self.panel, "sample", lambda: self.params(values))

    def params(self, values: dict[Any, Any]) -> dict[str, Any]:
        """The job's parameters from the form; a ToolInputError names the field that is wrong."""
        config = values.get(self.ctx.config_state) or {}
        run = str(values.get(self.run) or "").strip()
        base = str(values.get(self.base_model) or "").strip()
        lora = str(values.get(self.lora) or "").strip()
        embedding = str(values.get(self.embedding) or "").strip()
        params: dict[str, Any] = {"model_type": values.get(self.model_type), "workspace": str(self.ctx.workspace)}
        if run:
            if run not in {path for _, path in runs_with_backup(self.ctx.workspace)}:
                raise ToolInputError(f"Run: '{run}' has no complete backup (press Refresh runs)")
            if lora:
                raise ToolInputError("LoRA file: a run brings its own trained weights; clear the LoRA file or pick run 'none'")
            params["run"] = run
        elif not base:
            raise ToolInputError("Base model: give a Hugging Face id, a diffusers folder or a .safetensors file")
        else:
            params["base_model"] = base if is_model_id(base) else str(self.ctx.file("Base model", base, config))
        if lora:
            params["lora"] = lora if downloads_file(lora) else str(self.ctx.file("LoRA file", lora, config))
            params["lora_weight"] = self._number(values.get(self.lora_weight), "LoRA weight", float, 1.0)
        if embedding:
            params["embedding"] = embedding if downloads_file(embedding) else str(self.ctx.file("Embedding file", embedding, config))
            params["embedding_token"] = str(values.get(self.token) or "").strip()
        lines = [line.strip() for line in str(values.get(self.prompts) or "").splitlines() if line.strip()]
        if not lines:
            raise ToolInputError("Prompts: write at least one prompt (one per line)")
        shared = {
            "negative_prompt": str(values.get(self.negative) or ""),
            "width": self._number(values.get(self.width), "Width", int, 512, 16, 4096),
            "height": self._number(values.get(self.height), "Height", int, 512, 16, 4096),
            "steps": self._number(values.get(self.steps), "Steps", int, 20, 1, 1000),
            "cfg_scale": self._number(values.get(self.cfg), "CFG scale", float, 7.0, 0, 50),
            "seed": self._number(values.get(self.seed), "Seed", int, 42, -1),
            "sampler": str(values.get(self.sampler) or "DDIM"),
        }
        control = str(values.get(self.control) or "").strip()
        if control:
            info = family_info(params["model_type"])
            if info is None or not info.reads_sample_image:
                raise ToolInputError(f"Control image: {params['model_type']} samples from a prompt alone; clear it, or pick an "
                                     "image-editing (QWEN_IMAGE_EDIT) or image-to-video (WAN_2_1_I2V, WAN_2_2_I2V_A14B, WAN_2_2_TI2V_5B, LTX_2) model type")
            shared["control_image"] = str(self.ctx.file("Control image", control, config))
        params["prompts"] = [{**shared, "prompt": line} for line in lines]
        return params

    @staticmethod
    def _number(value: Any, field: str, kind: type, default: Any, low: float | None = None, high: float | None = None) -> Any:
        if value is None or value == "":
            return default
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise ToolInputError(f"{field}: '{value}' is not a number") from None
        if (low is not None and number < low) or (high is not None and number > high):
            raise ToolInputError(f"{field}: {number} is outside {low}..{high if high is not None else '∞'}")
        return number

    @staticmethod
    def render_result(result: dict[str, Any] | None) -> tuple:
        """The images with their prompt and seed as captions (also for a cancelled job's part)."""
        images = (result or {}).get("images") or []
        return ([(im["path"], f"{im['prompt']} (seed {im['seed']})") for im in images],)
