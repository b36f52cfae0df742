"""The run footer: start / stop / sample / backup / save, and the live view of the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gradio as gr

from ..runner.rundir import RunDir
from ..runner.supervisor import RunState, Supervisor
from .tensorboard import TensorBoard


def progress_html(state: RunState | None) -> str:
    if state is None:
        return ""
    p = state.progress
    bars = []
    if p.get("phase") == "caching" and p.get("total"):
        bars.append(("caching", p["done"], p["total"]))
    if p.get("phase") == "training":
        bars.append((f"epoch {p['epoch']}/{p['epochs']}", p["step"], p["steps_per_epoch"]))
        bars.append((f"step {p['global_step']}/{p['total_steps']}", p["global_step"], p["total_steps"]))
    out = []
    for label, done, total in bars:
        pct = 100.0 * done / total if total else 0.0
        out.append(
            f'<div class="ot-bar"><span>{label}</span><progress max="100" value="{pct:.1f}"></progress> {pct:.0f}%</div>'
        )
    return "".join(out)


def status_markdown(state: RunState | None) -> str:
    if state is None:
        return "No run yet."
    p = state.progress
    lines = [f"**{state.status}** {state.message}".strip()]
    if p.get("phase") == "training":
        eta = p.get("eta_s")
        lines.append(f"{p.get('it_s', 0)} it/s" + (f" · ETA {eta:.0f} s" if eta is not None else ""))
    if state.losses:
        lines.append(f"loss {state.losses[-1][1]:.4f}")
    if state.saved:
        lines.append(f"saved: `{state.saved[-1]}`")
    if state.exit_code not in (None, 0):
        lines.append(f"exit code {state.exit_code}")
    if state.warnings:
        lines.append("warnings:\n" + "\n".join(f"- {w}" for w in state.warnings[-8:]))
    return "\n\n".join(lines)


def loss_frame(state: RunState | None):
    import pandas as pd  # noqa: PLC0415

    rows: list[tuple[int, float, str]] = []
    if state is not None and state.losses:
        smooth = None
        for step, loss in state.losses:
            smooth = loss if smooth is None else 0.9 * smooth + 0.1 * loss
            rows.append((step, loss, "loss"))
            rows.append((step, smooth, "smoothed"))
    return pd.DataFrame(rows, columns=["step", "loss", "series"])


def lr_frame(state: RunState | None):
    import pandas as pd  # noqa: PLC0415

    return pd.DataFrame(state.lrs if state is not None else [], columns=["step", "lr"])


class Monitor:
    def __init__(self, workspace: Path, supervisor: Supervisor, tensorboard: TensorBoard | None = None):
        self.workspace = workspace
        self.supervisor = supervisor
        self.tensorboard = tensorboard or TensorBoard(Path(workspace) / "tensorboard.log")
        self._configs: dict[str, dict[str, Any]] = {}
        with gr.Row():
            self.start = gr.Button("Start training", variant="primary", elem_id="start")
            self.stop = gr.Button("Stop", variant="stop", elem_id="stop")
            self.sample_now = gr.Button("Sample now", elem_id="sample-now")
            self.backup_now = gr.Button("Backup now", elem_id="backup-now")
            self.save_now = gr.Button("Save now", elem_id="save-now")
        self.problems = gr.Markdown("", elem_id="problems")
        self.status = gr.Markdown("No run yet.", elem_id="run-status")
        self.progress = gr.HTML("", elem_id="run-progress")
        with gr.Row():
            self.loss_plot = gr.LinePlot(x="step", y="loss", color="series", title="Loss", height=240, elem_id="loss-plot")
            self.lr_plot = gr.LinePlot(x="step", y="lr", title="Learning rate", height=240, elem_id="lr-run-plot")
        self.gallery = gr.Gallery(label="Samples (newest first)", columns=4, height=320, elem_id="sample-gallery")
        self.tensorboard_link = gr.Markdown("", elem_id="tensorboard-link")
        self.log = gr.Textbox(label="Log tail (shown when a run fails)", lines=8, max_lines=30, elem_id="log-tail")
        self.timer = gr.Timer(1.0)
        self.run_id = gr.State("")

    def run_dir(self, run_id: str) -> RunDir:
        """The page keeps a run's folder path (runs may live in the config's workspace)."""
        path = Path(run_id)
        return RunDir(path if path.is_absolute() else self.workspace / "runs" / run_id)

    def run_config(self, run: RunDir) -> dict[str, Any]:
        """The exact config a run uses (read once: it never changes)."""
        key = str(run.path)
        if key not in self._configs:
            try:
                self._configs[key] = json.loads(run.config.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return {}
        return self._configs[key]

    def render(self, run_id: str) -> tuple[Any, ...]:
        """The poll: the whole state of the run on screen, rebuilt from all its events, so a
        tick that is skipped or arrives late loses nothing."""
        if not run_id:
            active = self.supervisor.active_runs()
            runs = active or self.supervisor.runs()
            if not runs:
                return run_id, "No run yet.", "", loss_frame(None), lr_frame(None), [], self.tensorboard.status_markdown(), ""
            run_id = str(runs[-1].path)  # reattach after a reload or an app restart
        self.supervisor.check_stop_timeouts()
        run = self.run_dir(run_id)
        state = self.supervisor.state(run)
        link = self.tensorboard.sync(self.run_config(run), run.path, state.alive)
        gallery = [(s["path"], f"step {s.get('step')}: {s.get('prompt', '')}") for s in reversed(state.samples[-24:])]
        return run_id, status_markdown(state), progress_html(state), loss_frame(state), lr_frame(state), gallery, link, state.log_tail

    @property
    def outputs(self) -> list:
        return [self.run_id, self.status, self.progress, self.loss_plot, self.lr_plot, self.gallery, self.tensorboard_link, self.log]

    def wire(self) -> None:
        outputs = self.outputs
        self.timer.tick(self.render, self.run_id, outputs, show_progress="hidden")

        def request(run_id: str, what: str) -> None:
            if not run_id:
                raise gr.Error("No run is active.")
            run = self.run_dir(run_id)
            if not self.supervisor.state(run).alive:
                raise gr.Error("The run is not running.")
            if what == "stop":
                gr.Info(f"Stop: {self.supervisor.stop(run)}")
            else:
                self.supervisor.request(run, what)
                gr.Info(f"{what.capitalize()} requested; it happens after the current step.")

        for button, what in ((self.stop, "stop"), (self.sample_now, "sample"), (self.backup_now, "backup"), (self.save_now, "save")):
            button.click(lambda r, w=what: request(r, w), self.run_id, None)
