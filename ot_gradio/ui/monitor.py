"""The run monitor: a compact run bar above the tabs (status, step/total, ETA, smoothed loss,
Start/Stop) and the Run tab (charts with the validation loss, samples, log, control buttons)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import gradio as gr

from ..runner.rundir import RunDir
from ..runner.supervisor import RunState, Supervisor
from ..runner.tensorboard import TensorBoard
from .charts import step_chart
from .run_output import OutputDownload, folder_note, with_absolute_paths
from .samples import samples_html


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


def stopping_line(state: RunState) -> str:
    """What a run asked to stop does until it ends: a step of a big model takes minutes, and the
    bar went on saying "training · ETA ..." meanwhile."""
    if state.status == "saving":
        return "writing the model, then it ends"
    if state.status == "backup":
        return "writing a backup, then the model"
    if state.status in ("starting", "loading", "caching"):  # the worker reads a Stop between steps
        return (f"{state.status} goes on, then one step, a backup and the model (a run that reports no progress for "
                "2 minutes meanwhile is ended: nothing is trained yet to lose)")
    return "finishing the step, then writing a backup and the model"


def status_markdown(state: RunState | None, stopping: bool = False) -> str:
    """The Run tab's status. `stopping`: a Stop was asked of this live run (its control file)."""
    if state is None:
        return "No run yet."
    p = state.progress
    failed = state.status in ("error", "crashed")
    lines = [f"**{state.status}** {reason_line(state.message, 1000) if failed else state.message}".strip()]
    if stopping:
        lines = [f"**stopping** (Stop requested): {stopping_line(state)}. Press Stop again to end it at once, without a backup."]
    if p.get("phase") == "training" and not stopping:
        eta = None if state.finished else p.get("eta_s")  # a stopped run has no time left
        rate = p.get("it_s")  # None until the first step (a resumed run reports where it starts)
        if rate is not None:
            lines.append(f"{rate} it/s" + (f" · ETA {eta:.0f} s" if eta is not None else ""))
    if state.losses:
        lines.append(f"loss {state.losses[-1][1]:.4f} (last step; the bar above shows it smoothed)")
    if state.saved:
        lines.append(f"saved: `{state.saved[-1]}`")
    if state.embedding_files:
        lines.append("embeddings (for ComfyUI / A1111): " + ", ".join(f"`{p}`" for p in state.embedding_files))
    if state.exit_code not in (None, 0):
        lines.append(f"exit code {state.exit_code}")
    if state.warnings:
        lines.append("warnings:\n" + "\n".join(f"- {w}" for w in state.warnings[-8:]))
    return "\n\n".join(lines)


def numeric_frame(columns: dict[str, list], series: list[str] | None = None):
    """A DataFrame whose plotted columns are float64 even when empty. Gradio types each column
    from its dtype, and the chart keeps the types of the first value it drew: an empty frame has
    object columns ("nominal"), and the live loss chart then showed one y label per loss value on
    a categorical x axis, with no line, until the page was reloaded."""
    import pandas as pd  # noqa: PLC0415

    frame = pd.DataFrame({k: pd.Series(v, dtype="float64") for k, v in columns.items()})
    if series is not None:
        frame["series"] = pd.Series(series, dtype="string")
    return frame


def loss_frame(state: RunState | None, validation: list[tuple[int, float]] | None = None, expect_validation: bool = False):
    """The loss chart's points. `expect_validation`: a run that validates has the validation
    series from its first point (one blank point until the first validation): the chart fixes its
    series when first drawn, and a page drawn, or reloaded, before the first validation never
    showed the validation line."""
    steps: list[float] = []
    values: list[float] = []
    series: list[str] = []
    if state is not None and state.losses:
        smooth = None
        for step, loss in state.losses:
            smooth = loss if smooth is None else 0.9 * smooth + 0.1 * loss
            steps += [step, step]
            values += [loss, smooth]
            series += ["loss", "smoothed"]
    for step, loss in validation or []:  # beside the training loss
        steps.append(step)
        values.append(loss)
        series.append("validation")
    if expect_validation and steps and "validation" not in series:
        steps.append(steps[0])
        values.append(float("nan"))  # drawn as nothing
        series.append("validation")
    return numeric_frame({"step": steps, "loss": values}, series)


def smoothed_loss(state: RunState | None) -> float | None:
    smooth = None
    for _, loss in state.losses if state is not None else []:
        smooth = loss if smooth is None else 0.9 * smooth + 0.1 * loss
    return smooth


def reason_line(message: str, limit: int = 240) -> str:
    """A failed run's reason as one line of text (never markup, never a traceback)."""
    line = next((x.strip() for x in message.splitlines() if x.strip()), "")
    line = line if len(line) <= limit else line[: limit - 1] + "…"
    return "".join("\\" + c if c in "\\`*_[]<>#|" else c for c in line)


def bar_markdown(state: RunState | None, stopping: bool = False) -> str:
    """One line for the run bar: status, step/total, ETA, smoothed loss. `stopping`: a Stop was
    asked of this live run; the bar says so until the run ends (no ETA meanwhile)."""
    if state is None:
        return "**No run yet**"
    p = state.progress
    parts = [f"**{state.status}**"]
    if stopping:
        parts = ["**stopping**", stopping_line(state)]
    if state.status in ("error", "crashed") and state.message.strip():
        parts.append(reason_line(state.message))  # the traceback stays behind the Run tab's "details" fold
    if state.status == "loading" and state.download:
        parts.append(reason_line(state.download, 60))  # a first run's minutes of download, seen from every tab
    if p.get("phase") == "training":
        parts.append(f"step {p.get('global_step', 0)}/{p.get('total_steps', '?')}")
        if p.get("eta_s") is not None and not state.finished and not stopping:  # no ETA once stopped, done or failed
            parts.append(f"ETA {p['eta_s']:.0f} s")
    smooth = smoothed_loss(state)
    if smooth is not None:
        parts.append(f"loss {smooth:.4f} (smoothed)")
    return " · ".join(parts)


def lr_frame(state: RunState | None):
    lrs = state.lrs if state is not None else []
    return numeric_frame({"step": [s for s, _ in lrs], "lr": [v for _, v in lrs]})


# the page's word on a first Stop (runner/supervisor.py does what it says)
STOP_ASKED = ("Stop requested: the run finishes its step, writes a backup and the model, then ends. It is not cut short "
              "while it writes them, however long that takes; press Stop again to end it at once, without a backup.")
REFUSED = "refused"  # run_id after a refused Start: the footer shows no run until the next one


class Monitor:
    def __init__(self, workspace: Path, supervisor: Supervisor, tensorboard: TensorBoard | None = None):
        self.workspace = workspace
        self.supervisor = supervisor
        self.tensorboard = tensorboard or TensorBoard(Path(workspace) / "tensorboard.log")
        self._configs: dict[str, dict[str, Any]] = {}
        self._urls: dict[str, str] = {}  # sample file -> its URL in gradio's cache (made once; a failure is retried)
        self.output_download = OutputDownload()

    def build_bar(self) -> None:
        """The run bar, above the tabs: seen on every tab without scrolling."""
        with gr.Group(elem_id="ot-run-bar"):
            with gr.Row(equal_height=True, elem_classes="ot-run-row"):
                self.bar = gr.Markdown("**No run yet**", elem_id="run-bar-status", elem_classes="ot-run-text")
                self.start = gr.Button("Start training", variant="primary", elem_id="start", scale=0, min_width=170)
                self.stop = gr.Button("Stop", variant="stop", elem_id="stop", scale=0, min_width=90)
                # "Add to queue" and the queue length go into this row (elem_id ot-run-bar-extra)
                self.bar_extra = gr.Row(elem_id="ot-run-bar-extra", elem_classes="ot-run-extra", scale=0)
            self.progress = gr.HTML("", elem_id="run-progress")
            self.problems = gr.Markdown("", elem_id="problems")
        # The poll's timer lives with the bar, outside the tabs: gradio mounts a tab's components
        # (a timer among them) only once the tab is opened, and a timer on the Run tab left the
        # bar at "No run yet" on every other tab until the Run tab had been visited.
        self.timer = gr.Timer(1.0)
        self.run_id = gr.State("")
        self.shown = gr.State("")  # what the charts and samples show now (see poll)

    def build_run_tab(self) -> None:
        """The Run tab: the run's status, charts, samples, log and its control buttons."""
        with gr.Row(elem_classes="ot-wrap"):
            self.sample_now = gr.Button("Sample now", elem_id="sample-now", min_width=100)
            self.backup_now = gr.Button("Backup now", elem_id="backup-now", min_width=100)
            self.save_now = gr.Button("Save now", elem_id="save-now", min_width=100)
        self.status = gr.Markdown("No run yet.", elem_id="run-status")
        # the finished run's model, for a share link's or Colab's user (their computer is not this one)
        self.download = gr.DownloadButton("Download the model", visible=False, elem_id="run-download", scale=0, min_width=240)
        with gr.Row(elem_classes="ot-wrap"):
            self.loss_plot = gr.LinePlot(x="step", y="loss", color="series", title="Loss (training, smoothed, validation)",
                                         height=240, min_width=300, elem_id="loss-plot")
            self.lr_plot = gr.LinePlot(x="step", y="lr", title="Learning rate", height=240, min_width=300, elem_id="lr-run-plot")
        # Samples at their own size in a grid, newest first, with step and prompt (a gr.Gallery
        # stretched a single 64 px sample over the whole width, blurred).
        self.gallery = gr.HTML("", label="Samples (newest first)", elem_id="sample-gallery")
        self.tensorboard_link = gr.Markdown("", elem_id="tensorboard-link")
        # A failed run's reason is one line in the bar and the status above; its traceback only here, folded
        with gr.Accordion("Details (the log's last lines, when a run fails)", open=False, elem_id="run-details"):
            self.log = gr.Textbox(label="Log tail", lines=8, max_lines=30, elem_id="log-tail")

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

    def followed(self, run_id: str) -> str:
        """The run a page shows: the one it started while that one is running, else whatever
        run is active, whoever started it (the queue, another page, the HTTP API), else the
        newest. A page kept the run it had started: after Stop, with the queue training the next
        entry, every open page said "stopped" until it was reloaded."""
        active = self.supervisor.active_runs()
        if run_id and run_id != REFUSED:
            shown = self.run_dir(run_id).path.resolve()
            if any(r.path.resolve() == shown for r in active):
                return run_id
            if active:
                return str(active[-1].path)
            runs = self.supervisor.runs()  # a queued run may have started and ended between two polls
            newest = runs[-1] if runs else None
            newer = newest is not None and newest.run_id[:15] > shown.name[:15]  # ids start with the second they were made in
            return str(newest.path) if newer else run_id
        runs = active or self.supervisor.runs()
        return str(runs[-1].path) if runs else run_id  # reattach after a reload or an app restart

    def render(self, run_id: str) -> tuple[Any, ...]:
        """The poll: the whole state of the run on screen, rebuilt from all its events, so a
        tick that is skipped or arrives late loses nothing."""
        return self._render(run_id)[0]

    def _render(self, run_id: str) -> tuple[tuple[Any, ...], int | None, tuple[RunDir, RunState] | None]:
        """render()'s outputs, the run's total steps when it has said them, and the run shown with its state."""
        if run_id == REFUSED and not self.supervisor.active_runs():  # no earlier run's numbers under the problems
            return (run_id, "Nothing started: fix the problems above and press Start again.", "", loss_frame(None), lr_frame(None), [],
                    self.tensorboard.status_markdown(), "", "**Nothing started**: fix the problems listed here"), None, None
        run_id = self.followed(run_id)
        if not run_id:
            return (run_id, "No run yet.", "", loss_frame(None), lr_frame(None), [], self.tensorboard.status_markdown(), "",
                    bar_markdown(None)), None, None
        self.supervisor.check_stop_timeouts()
        run = self.run_dir(run_id)
        state = with_absolute_paths(self.supervisor.state(run))  # where the files are on this machine
        stopping = self.stopping(run, state)
        link = self.tensorboard.sync(self.run_config(run), run.path, state.alive)
        gallery = [(s["path"], f"step {s.get('step')}: {s.get('prompt', '')}") for s in reversed(state.samples[-24:])]
        total = state.progress.get("total_steps")
        status = "\n\n".join(x for x in (status_markdown(state, stopping), folder_note(state)) if x)
        return (run_id, status, progress_html(state), loss_frame(state, state.validation, bool(self.run_config(run).get("validation"))), lr_frame(state),
                gallery, link, state.log_tail, bar_markdown(state, stopping)), total if isinstance(total, int) else None, (run, state)

    def stopping(self, run: RunDir, state: RunState) -> bool:
        """A Stop was asked of this live run: its control file stays until the run ends (whoever
        asked: this page, another one, the queue or the HTTP API)."""
        return state.alive and not state.finished and (run.control / "stop").exists()

    def poll(self, run_id: str, shown: str) -> tuple[Any, ...]:
        """The timer's render: charts and samples are sent only when they changed. Sent every
        second, each chart was drawn anew every second (it blinked during a whole run)."""
        rendered, total, shown_run = self._render(run_id)
        out = list(rendered)
        losses, lrs, gallery = out[3], out[4], out[5]
        # the Run tab's download of the shown run's model, once that run has ended
        run, state = shown_run or (None, None)
        download, offered = self.output_download.update(run, state, self.run_config(run) if run else {}, self.download)
        # No points: the chart is cleared (None), never sent an empty frame. Gradio's chart fixes
        # its axis types and its series colours when it is first drawn and later only swaps the
        # data: first drawn empty, the live loss chart showed no line until a reload.
        out[3] = losses if len(losses) else None
        out[4] = lrs if len(lrs) else None
        # Only samples the page can load count as shown: one whose copy failed is tried again
        # next poll (it was left out of the gallery for good).
        shown_samples = [g for g in gallery if self.sample_url(g[0])]
        key = json.dumps([out[0], len(losses), losses.tail(2).to_json(), len(lrs), lrs.tail(1).to_json(), [g[0] for g in shown_samples], offered])
        if key == shown:
            out[3] = out[4] = out[5] = download = gr.skip()
        else:  # both step axes from 0 to the run's length: whole steps, the same scale on both
            out[3], out[4] = step_chart(out[3], total), step_chart(out[4], total)
            out[5] = samples_html(shown_samples, self.sample_url)
        return (*out, download, key)

    def sample_url(self, path: str) -> str | None:
        """A URL for a sample image: a copy in gradio's cache, served to the page whatever folder
        the run writes to (the app serves only its workspace and the concept folders itself).
        Made once per file (a sample never changes) for every page."""
        if path in self._urls:
            return self._urls[path]
        try:
            cached = self.gallery.move_resource_to_block_cache(path)
        except (OSError, ValueError):
            return None
        if not cached:
            return None
        self._urls[path] = f"gradio_api/file={quote(str(cached))}"
        return self._urls[path]

    @property
    def outputs(self) -> list:
        return [self.run_id, self.status, self.progress, self.loss_plot, self.lr_plot, self.gallery, self.tensorboard_link, self.log, self.bar]

    def wire(self) -> None:
        self.timer.tick(self.poll, [self.run_id, self.shown], [*self.outputs, self.download, self.shown], show_progress="hidden")

        def request(run_id: str, what: str) -> None:
            # said, not raised: pressing Stop with nothing running is no error (no red box, no traceback in the log)
            if not run_id or run_id == REFUSED:
                gr.Info(f"No run is active: nothing to {what}.")
                return
            run = self.run_dir(run_id)
            if not self.supervisor.state(run).alive:
                gr.Info(f"The run has ended: nothing to {what}.")
                return
            if what == "stop":
                done = self.supervisor.stop(run)
                gr.Info(STOP_ASKED if done == "stop requested" else f"Stop: {done}")
            else:
                self.supervisor.request(run, what)
                gr.Info(f"{what.capitalize()} requested; it happens after the current step.")

        for button, what in ((self.stop, "stop"), (self.sample_now, "sample"), (self.backup_now, "backup"), (self.save_now, "save")):
            button.click(lambda r, w=what: request(r, w), self.run_id, None)
