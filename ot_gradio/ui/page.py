"""The page. For now one Run tab: pick a preset or a config file, start, watch, stop.

Gradio only: no torch, diffusers or trainer imports. Training runs in a worker process through
the supervisor; every poll rebuilds the run's state from its events, so a reload loses nothing."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from ..config.presets import list_presets, resolve_preset_path
from ..runner.rundir import RunDir
from ..runner.supervisor import RunState, Supervisor


def _load_config_dict(preset: str, config_file: str) -> dict:
    from ..config.io import config_to_dict, load_config  # noqa: PLC0415

    if config_file.strip():
        path = Path(config_file.strip())
        if not path.is_file():
            raise gr.Error(f"Config file: {path} does not exist")
    else:
        path = resolve_preset_path(preset)
        if path is None:
            raise gr.Error(f"Preset: {preset} not found")
    loaded = load_config(json.loads(path.read_text(encoding="utf-8")), base_dir=path.parent, source=str(path))
    return config_to_dict(loaded.config)


def _render(state: RunState | None) -> tuple[str, list, str, str]:
    if state is None:
        return "No run yet.", [], "", ""
    p = state.progress
    lines = [f"**{state.status}** {state.message}".strip()]
    if p.get("phase") == "training":
        eta = p.get("eta_s")
        lines.append(
            f"epoch {p['epoch']}/{p['epochs']} · step {p['global_step']}/{p['total_steps']} · "
            f"{p['it_s']} it/s" + (f" · ETA {eta:.0f} s" if eta is not None else "")
        )
    if state.losses:
        lines.append(f"last loss {state.losses[-1][1]:.4f}")
    if state.saved:
        lines.append(f"saved: `{state.saved[-1]}`")
    if state.warnings:
        lines.append("warnings:\n" + "\n".join(f"- {w}" for w in state.warnings[-5:]))
    gallery = [(s["path"], f"step {s['step']}: {s['prompt']}") for s in state.samples[-12:]]
    loss_text = "\n".join(f"{step}\t{loss:.5f}" for step, loss in state.losses[-200:])
    return "\n\n".join(lines), gallery, loss_text, state.log_tail


def build_page(workspace: Path) -> gr.Blocks:
    supervisor = Supervisor(workspace)
    presets = list_presets()

    with gr.Blocks(title="ot_gradio") as page:
        gr.Markdown("# ot_gradio\nTrain LoRAs in the browser. Pick a preset or a config file (ours or OneTrainer's) and start.")
        run_id = gr.State("")
        with gr.Row():
            preset = gr.Dropdown(presets, value="demo" if "demo" in presets else (presets[0] if presets else None), label="Preset", info="A preset from presets/.")
            config_file = gr.Textbox(label="Config file", info="A config JSON (ours or OneTrainer's). Overrides the preset when set.")
        with gr.Row():
            start = gr.Button("Start training", variant="primary")
            stop = gr.Button("Stop", variant="stop")
            sample_now = gr.Button("Sample now")
            backup_now = gr.Button("Backup now")
        status = gr.Markdown("No run yet.", elem_id="run-status")
        gallery = gr.Gallery(label="Samples", columns=4, height=300)
        losses = gr.Textbox(label="Loss (step, loss)", lines=6, max_lines=12)
        log = gr.Textbox(label="Log (shown when a run fails)", lines=6, max_lines=20)
        timer = gr.Timer(1.0)

        def on_start(preset_name: str, cfg_file: str, current: str):
            if current and supervisor.state(RunDir(workspace / "runs" / current)).alive:
                raise gr.Error("A run is already active; stop it first.")
            config = _load_config_dict(preset_name or "", cfg_file or "")
            run = supervisor.start(config)
            return run.run_id

        def on_request(current: str, what: str) -> None:
            if not current:
                raise gr.Error("No run.")
            run = RunDir(workspace / "runs" / current)
            if what == "stop":
                gr.Info(supervisor.stop(run))
            else:
                supervisor.request(run, what)

        def on_tick(current: str):
            if not current:
                active = supervisor.active_runs()
                if not active:
                    return current, *_render(None)
                current = active[-1].run_id  # reattach after a reload
            supervisor.check_stop_timeouts()
            return current, *_render(supervisor.state(RunDir(workspace / "runs" / current)))

        start.click(on_start, [preset, config_file, run_id], [run_id])
        stop.click(lambda c: on_request(c, "stop"), [run_id], None)
        sample_now.click(lambda c: on_request(c, "sample"), [run_id], None)
        backup_now.click(lambda c: on_request(c, "backup"), [run_id], None)
        timer.tick(on_tick, [run_id], [run_id, status, gallery, losses, log])
    return page
