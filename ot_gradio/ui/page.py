"""The page: top bar, OneTrainer's tabs built from the config schema, and the run footer.

Gradio only: no torch, diffusers or trainer imports. Handlers take and return whole config
dicts (kept in a gr.State and in the workspace, so a reload loses nothing); training runs in a
worker process through the supervisor."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import gradio as gr

from ..config.doctor import check
from ..config.doctor import errors as doctor_errors
from ..config.io import ConfigError, config_to_dict, load_config
from ..config.optimizer import optimizer_keys
from ..config.presets import list_presets
from ..runner.supervisor import Supervisor
from .concepts import ConceptsTab
from .form import Field, build_fields, config_from_values, make_component, schema_fields, values_from_config
from .guide import GUIDE
from .monitor import Monitor
from .samples import SamplesTab, to_rows
from .state import load_ui_config, preset_config, save_ui_config
from .training_tab import lr_frame, memory_markdown

TOP_FIELDS = ("model_type", "training_method")
SHOWN_PARTS = ("unet", "text_encoder", "vae")
PART_LABELS = {"unet": "UNet", "text_encoder": "Text encoder", "vae": "VAE"}
TABS = (("General", "general"), ("Model", "model"), ("Data", "data"), ("Training", "training"), ("Sampling", "sampling"),
        ("Backup", "backup"), ("LoRA", "lora"), ("Embedding", "embedding"))
LR_INPUTS = ("learning_rate", "learning_rate_scheduler", "learning_rate_warmup_steps", "learning_rate_cycles",
             "learning_rate_min_factor", "epochs", "batch_size", "gradient_accumulation_steps")
CSS = ".ot-bar{display:flex;gap:.5em;align-items:center}.ot-bar progress{flex:1;height:1em}"


def _part_of(path: str) -> str | None:
    head = path.split(".", 1)[0]
    return head if "." in path and head not in ("optimizer", "secrets") else None


def validate(config: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str], list[str]]:
    """(the validated config, problems by field, warnings). Nothing starts while problems exist."""
    try:
        loaded = load_config(copy.deepcopy(config))
    except ConfigError as err:
        return None, list(getattr(err, "errors", None) or [str(err)]), []
    problems: list[str] = doctor_errors(loaded.config)
    for i, concept in enumerate(loaded.config.concepts):
        if concept.enabled and not Path(concept.path).is_dir() and not concept.path.replace("\\", "/").endswith("demo-data/shapes"):
            problems.append(f"concepts[{i}].path: folder '{concept.path}' does not exist")
    return config_to_dict(loaded.config), problems, loaded.warnings + check(loaded.config)


def build_page(workspace: Path) -> gr.Blocks:
    workspace = Path(workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    supervisor = Supervisor(workspace)
    initial = load_ui_config(workspace)
    supervisor.watch(initial.get("workspace_dir") or workspace)
    fields: dict[str, Field] = {}
    presets = list_presets()

    with gr.Blocks(title="ot_gradio") as page:
        config_state = gr.State(initial)
        gr.Markdown("# ot_gradio\nTrain LoRAs of diffusion models in the browser. Every field has a tooltip under its label.")
        with gr.Row():
            for path in TOP_FIELDS:
                info = next(f for f in schema_fields() if f.path == path)
                fields[path] = make_component(info)
            preset = gr.Dropdown(presets, value=None, label="Preset", info="Load a preset from presets/ over the defaults.", elem_id="preset")
        with gr.Row():
            config_path = gr.Textbox(label="Config file", info="Path of a config JSON (ours or OneTrainer's) to load, or to save to.", scale=3, elem_id="config-path")
            load_btn = gr.Button("Load", scale=0)
            save_btn = gr.Button("Save", scale=0)
            upload = gr.UploadButton("Import file", file_types=[".json"], scale=0)
            export = gr.DownloadButton("Export", scale=0)

        tab_handles: dict[str, gr.Tab] = {}
        with gr.Tabs():
            with gr.Tab("Start here"):
                gr.Markdown(GUIDE)
            for title, tab in TABS:
                with gr.Tab(title, elem_id=f"tab-{tab}") as handle:
                    tab_handles[tab] = handle
                    infos = [f for f in schema_fields(tab=tab) if f.path not in TOP_FIELDS]
                    main = [f for f in infos if not _part_of(f.path) and not f.path.startswith("optimizer.")]
                    fields.update(build_fields(main))
                    if tab == "model":
                        memory = gr.Markdown(memory_markdown(initial), elem_id="memory-table")
                    if tab == "training":
                        lr_plot = gr.LinePlot(lr_frame(initial), x="step", y="lr", title="Learning rate over the run", height=220, elem_id="lr-plot")
                        with gr.Accordion("Optimizer", open=True):
                            opt_infos = [f for f in infos if f.path.startswith("optimizer.")]
                            fields.update(build_fields(opt_infos))
                            load_defaults = gr.Button("Load defaults", elem_id="optimizer-defaults")
                    for part in SHOWN_PARTS:
                        part_infos = [f for f in infos if _part_of(f.path) == part]
                        if part_infos:
                            with gr.Accordion(PART_LABELS[part], open=part == "unet"):
                                fields.update(build_fields(part_infos))
                    if tab == "sampling":
                        samples = SamplesTab()
            with gr.Tab("Concepts", elem_id="tab-concepts"):
                concepts = ConceptsTab()
            with gr.Tab("Tools"):
                gr.Markdown("Caption editor, mask painting, automatic captions and masks, model conversion: coming with the Tools issue.")

        monitor = Monitor(workspace, supervisor)
        components = {f.component for f in fields.values()}
        opt_fields = {p: f for p, f in fields.items() if p.startswith("optimizer.") and p != "optimizer.optimizer"}

        def autosave(config: dict[str, Any]) -> None:
            save_ui_config(workspace, config)

        def visibility(config: dict[str, Any]) -> dict:
            keys = set(optimizer_keys(config.get("optimizer", {}).get("optimizer", "ADAMW")))
            out: dict = {f.component: gr.update(visible=p.split(".", 1)[1] in keys) for p, f in opt_fields.items()}
            method = config.get("training_method")
            out[tab_handles["lora"]] = gr.update(visible=method == "LORA")
            out[tab_handles["embedding"]] = gr.update(visible=method == "EMBEDDING" or bool(config.get("additional_embeddings")))
            return out

        def populate(config: dict[str, Any]) -> dict:
            out = {config_state: config, **values_from_config(fields, config), **visibility(config)}
            out[samples.table] = to_rows(config.get("samples", []))
            out[lr_plot] = lr_frame(config)
            out[memory] = memory_markdown(config)
            out.update(concepts.show(config, 0))
            return out

        all_outputs = [config_state, *components, samples.table, lr_plot, memory, tab_handles["lora"], tab_handles["embedding"], *concepts.outputs]

        def on_edit(values: dict) -> dict:
            config = config_from_values(fields, values, values[config_state])
            autosave(config)
            return {config_state: config, lr_plot: lr_frame(config), memory: memory_markdown(config), **visibility(config)}

        edit_outputs = [config_state, lr_plot, memory, tab_handles["lora"], tab_handles["embedding"], *[f.component for f in opt_fields.values()]]
        for path, f in fields.items():
            if path == "optimizer.optimizer":
                continue
            f.component.input(on_edit, {config_state, *components}, edit_outputs, show_progress="hidden")

        def on_optimizer(values: dict) -> dict:
            """Switching optimizer keeps the old one's settings and restores the new one's last ones."""
            from ..config.optimizer import optimizer_param_defaults  # noqa: PLC0415

            config = copy.deepcopy(values[config_state])
            old = config.get("optimizer", {})
            remembered = config.setdefault("optimizer_defaults", {})
            if old.get("optimizer"):
                remembered[old["optimizer"]] = old
            new_name = values[fields["optimizer.optimizer"].component]
            base = remembered.get(new_name) or {**{k: None for k in old}, **optimizer_param_defaults(new_name)}
            config["optimizer"] = {**old, **{k: v for k, v in base.items() if k in old}, "optimizer": new_name}
            autosave(config)
            return populate(config)

        fields["optimizer.optimizer"].component.input(on_optimizer, {config_state, *components}, all_outputs)

        def on_load_defaults(config: dict[str, Any]) -> dict:
            from ..config.optimizer import optimizer_param_defaults  # noqa: PLC0415

            config = copy.deepcopy(config)
            name = config["optimizer"]["optimizer"]
            config["optimizer"] = {**config["optimizer"], **{k: v for k, v in optimizer_param_defaults(name).items() if k in config["optimizer"]}}
            autosave(config)
            return populate(config)

        load_defaults.click(on_load_defaults, config_state, all_outputs)

        def on_preset(name: str) -> dict:
            if not name:
                raise gr.Error("Choose a preset first.")
            config = preset_config(name)
            autosave(config)
            gr.Info(f"Preset {name} loaded.")
            return populate(config)

        preset.input(on_preset, preset, all_outputs)

        def read_any(path: str) -> dict[str, Any]:
            p = Path(path.strip())
            if not p.is_file():
                raise gr.Error(f"Config file: {p} does not exist.")
            try:
                loaded = load_config(json.loads(p.read_text(encoding="utf-8")), base_dir=p.parent, source=str(p))
            except (ConfigError, json.JSONDecodeError) as err:
                raise gr.Error(f"Config file {p.name}: {err}") from None
            for warning in loaded.warnings:
                gr.Warning(warning)
            return config_to_dict(loaded.config)

        def on_load(path: str) -> dict:
            config = read_any(path)
            autosave(config)
            return populate(config)

        def on_upload(file) -> dict:
            config = read_any(file if isinstance(file, str) else file.name)
            autosave(config)
            return populate(config)

        def on_save(path: str, config: dict[str, Any]) -> None:
            if not path.strip():
                raise gr.Error("Config file: enter a path to save to.")
            from ..fsutil import atomic_write_json  # noqa: PLC0415

            atomic_write_json(Path(path.strip()), config, indent=2)
            gr.Info(f"Saved {path.strip()}")

        def on_export(config: dict[str, Any]) -> str:
            from ..fsutil import atomic_write_json  # noqa: PLC0415

            out = workspace / "exports" / "config.json"
            atomic_write_json(out, config, indent=2)
            return str(out)

        load_btn.click(on_load, config_path, all_outputs)
        upload.upload(on_upload, upload, all_outputs)
        save_btn.click(on_save, [config_path, config_state], None)
        export.click(on_export, config_state, export)

        concepts.wire(config_state, autosave)
        samples.wire(config_state, autosave)
        monitor.wire()

        def on_start(values: dict) -> dict:
            """Builds the config from what the form shows right now (an edit still in flight
            cannot be lost), validates all of it, and only then starts the worker."""
            config = config_from_values(fields, values, values[config_state])
            config = concepts.apply(config, values)
            run_id = values[monitor.run_id]
            for run in supervisor.active_runs():
                raise gr.Error(f"A run is already active ({run.run_id}); stop it first.")
            valid, problems, warnings = validate(config)
            if problems:
                gr.Warning(f"{len(problems)} problem(s): nothing was started.")
                return {monitor.run_id: run_id, monitor.problems: "### Fix these before starting\n" + "\n".join(f"- `{p}`" for p in problems)}
            from ..data.demo import ensure_demo_concepts  # noqa: PLC0415

            ensure_demo_concepts(load_config(copy.deepcopy(valid)).config)
            run = supervisor.start(valid, workspace=valid.get("workspace_dir") or workspace)
            note = "\n".join(f"- {w}" for w in warnings)
            return {monitor.run_id: str(run.path), monitor.problems: (f"### Started with warnings\n{note}" if warnings else "")}

        start_inputs = {config_state, monitor.run_id, *components, *concepts.outputs}
        monitor.start.click(on_start, start_inputs, [monitor.run_id, monitor.problems])
        page.load(lambda: populate(load_ui_config(workspace)), None, all_outputs)
    return page
