"""The Runs tab: every run of the workspace, one opened (charts, log, config, output file), 2-4
compared (loss overlaid, config differences, samples side by side), a run deleted after its name
is typed. Handlers are plain methods (tests call them); data comes from runner.history."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from ..runner import history
from ..runner.rundir import RunDir, runs_root
from .charts import step_chart
from .monitor import numeric_frame

MAX_COMPARED = 4


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (OSError, ValueError):
        return False
    return True


class RunsTab:
    def __init__(self, workspace_fn: Callable[[], str | Path], load_config_fn: Callable[[str], Any] | None = None,
                 load_outputs: list | None = None, tab: gr.Tab | None = None):
        self.tab = tab
        self.workspace_fn = workspace_fn
        self.load_config_fn = load_config_fn
        self.load_outputs = list(dict.fromkeys(load_outputs or []))  # each component once
        table, names = self.rows()  # the runs when the page is built; Refresh reads them again
        with gr.Row():
            self.refresh_btn = gr.Button("Refresh", scale=0, elem_id="runs-refresh")
            self.selected = gr.Dropdown(names, value=[], multiselect=True, max_choices=MAX_COMPARED, scale=4,
                                        label="Runs (up to 4)", info="Open shows the first; Compare overlays 2-4.", elem_id="runs-selected")
            self.open_btn = gr.Button("Open", scale=0, elem_id="runs-open")
            self.compare_btn = gr.Button("Compare", scale=0, elem_id="runs-compare")
        self.table = gr.Dataframe(table or None, headers=list(history.COLUMNS), interactive=False, label="Runs, newest first", elem_id="runs-table")
        self.message = gr.Markdown("", elem_id="runs-message")
        with gr.Row():
            self.loss_plot = gr.LinePlot(x="step", y="value", color="series", title="Loss", height=240, elem_id="runs-loss-plot")
            self.lr_plot = gr.LinePlot(x="step", y="lr", title="Learning rate", height=240, elem_id="runs-lr-plot")
        with gr.Accordion("Log, config and output of the opened run", open=False) as self.details:
            self.log = gr.Textbox(label="Log tail", lines=8, max_lines=30, elem_id="runs-log")
            self.config = gr.Code(language="json", label="Config", max_lines=30, elem_id="runs-config")  # scrolls: the output stays near
            with gr.Row():
                self.load_btn = gr.Button("Load this config", visible=bool(self.load_outputs), elem_id="runs-load-config")
                self.output = gr.DownloadButton("Download output file", visible=False, elem_id="runs-output")
            self.output_note = gr.Markdown("", elem_id="runs-output-note")
        self.compare_plot = gr.LinePlot(x="step", y="loss", color="run", title="Smoothed loss by run", height=280, elem_id="runs-compare-plot")
        self.differing = gr.Dataframe(headers=["field", "values"], interactive=False, label="Config fields that differ", elem_id="runs-differing")
        self.gallery = gr.Gallery(interactive=False, label="Samples: the opened run's newest first, or the compared runs' side by side (run · step · prompt)", columns=MAX_COMPARED, height=420,
                                  object_fit="scale-down", elem_id="runs-gallery")  # a 64 px sample stays 64 px, sharp
        with gr.Accordion("Delete a run", open=False):
            self.confirm = gr.Textbox(label="Type the run's name to delete it (its folder only; a model saved outside it stays)",
                                      elem_id="runs-confirm")
            self.delete_btn = gr.Button("Delete run", variant="stop", elem_id="runs-delete")
        self.wire()

    # --- data -------------------------------------------------------------------------------------
    def workspace(self) -> Path:
        return Path(self.workspace_fn())

    def run(self, name: str) -> RunDir:
        """A run of the workspace by name (a name that is not one is refused, never a path)."""
        names = {r.run_id for r in history.run_folders(self.workspace())}
        if name not in names:
            raise gr.Error(f"Runs: no run named {name!r} in {runs_root(self.workspace())}; press Refresh.")
        return RunDir(runs_root(self.workspace()) / name)

    def _first(self, selected: list[str] | None) -> RunDir:
        if not selected:
            raise gr.Error("Runs: select a run first.")
        return self.run(selected[0])

    # --- handlers ---------------------------------------------------------------------------------
    def rows(self) -> tuple[list[list[Any]], list[str]]:
        rows = history.list_runs(self.workspace())
        return [[r[c] for c in history.COLUMNS] for r in rows], [r["name"] for r in rows]

    def refresh(self, selected: list[str] | None = None):
        table, names = self.rows()
        kept = [s for s in (selected or []) if s in names]
        return table, gr.update(choices=names, value=kept)

    def on_row(self, selected: list[str] | None, event: gr.SelectData):
        """A click on a row of the table opens that run (first in the selection, so Compare keeps
        the others): the table only highlighted the cell, which looked like an edit."""
        name = str((event.row_value or [event.value])[0] or "")
        if name not in self.rows()[1]:
            return (gr.skip(),) * 9
        chosen = [name] + [s for s in (selected or []) if s != name][: MAX_COMPARED - 1]
        return (gr.update(value=chosen), *self.open(chosen))

    def open(self, selected: list[str] | None):
        run = self._first(selected)
        s = history.run_series(run)
        n, nv = len(s["step"]), len(s["validation_step"])
        losses = numeric_frame({"step": s["step"] * 2 + s["validation_step"], "value": s["loss"] + s["smooth_loss"] + s["validation_loss"]},
                               ["loss"] * n + ["smoothed"] * n + ["validation"] * nv)
        lrs = numeric_frame({"step": s["step"], "lr": s["lr"]})
        config = history.run_config(run)
        samples = [(str(x["path"]), f"{run.run_id} · step {x.get('step')} · {x.get('prompt', '')}")
                   for x in reversed(history.run_state(run).samples)]
        output = self.output_path(run, config)
        note = f"Output file: `{output}`" if output else "No output file of this run to download (none saved, or not under the workspace or its output path)."
        # the button downloads the value it holds when clicked: it gets the file here (a copy in
        # gradio's cache, served whatever folder the model is in)
        button = gr.update(value=self.output.move_resource_to_block_cache(output), visible=True) if output else gr.update(value=None, visible=False)
        return (step_chart(losses), step_chart(lrs), run.log_tail(80), json.dumps(config, indent=2), note, self.cached(self.gallery, samples),
                gr.update(open=True), button)

    def output_path(self, run: RunDir, config: dict[str, Any]) -> str | None:
        """The run's output file, offered only when it is under the workspace or is the run's
        configured output path (never another file a tampered events line names)."""
        return history.trusted_output(run, self.workspace(), config)

    def cached(self, component, items: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Sample images inside the workspace (never a file an events line names elsewhere), as
        copies in gradio's cache: served whatever folder the workspace is in."""
        out = []
        for path, caption in items:
            if _inside(Path(path), self.workspace()) and Path(path).is_file():
                out.append((component.move_resource_to_block_cache(path) or path, caption))
        return out

    def compare(self, selected: list[str] | None):
        if not selected or len(selected) < 2:
            raise gr.Error("Compare: select 2 to 4 runs.")
        data = history.compare([self.run(n) for n in selected[:MAX_COMPARED]])
        loss = data["loss"]
        frame = numeric_frame({"step": [r[0] for r in loss], "loss": [r[1] for r in loss]})
        import pandas as pd  # noqa: PLC0415

        frame["run"] = pd.Series([r[2] for r in loss], dtype="string")
        differing = [[path, " | ".join(f"{n}: {v}" for n, v in zip(selected, values, strict=False))]
                     for path, values in data["differing"].items()]
        gallery = [(path, f"{run} · step {step} · {prompt}") for prompt, step, items in data["samples"] for run, path in items]
        return step_chart(frame), differing, self.cached(self.gallery, gallery)

    def load_config(self, selected: list[str] | None):
        run = self._first(selected)
        if self.load_config_fn is None:
            raise gr.Error("Load this config: not available here.")
        result = self.load_config_fn(str(run.config))
        if isinstance(result, dict) and self.load_outputs:  # only what this button may update
            return {k: v for k, v in result.items() if k in self.load_outputs}
        return result

    def delete(self, selected: list[str] | None, confirm: str):
        run = self._first(selected)
        try:
            history.delete_run(run, confirm)
        except history.DeleteRefused as err:
            raise gr.Error(str(err)) from None
        table, choices = self.refresh([s for s in selected if s != run.run_id])
        return f"Deleted run folder `{run.path}`.", table, choices, ""

    def wire(self) -> None:
        self.refresh_btn.click(self.refresh, self.selected, [self.table, self.selected])
        if self.tab is not None:  # opening the tab lists the runs as they are now
            self.tab.select(self.refresh, self.selected, [self.table, self.selected], show_progress="hidden")
        opened = [self.loss_plot, self.lr_plot, self.log, self.config, self.output_note, self.gallery, self.details, self.output]
        self.open_btn.click(self.open, self.selected, opened)
        self.table.select(self.on_row, self.selected, [self.selected, *opened])
        self.compare_btn.click(self.compare, self.selected, [self.compare_plot, self.differing, self.gallery])
        self.delete_btn.click(self.delete, [self.selected, self.confirm], [self.message, self.table, self.selected, self.confirm])
        if self.load_outputs:
            self.load_btn.click(self.load_config, self.selected, self.load_outputs, show_progress_on=[self.load_btn])


def build_runs_tab(workspace_fn: Callable[[], str | Path], load_config_fn: Callable[[str], Any] | None = None,
                   load_outputs: list | None = None, tab: gr.Tab | None = None) -> RunsTab:
    """Builds the tab's contents inside the caller's gr.Tab. `load_config_fn(path)` loads a config
    file into the page and returns its updates for `load_outputs`; `tab` (the caller's gr.Tab)
    re-reads the runs when it is opened."""
    return RunsTab(workspace_fn, load_config_fn, load_outputs, tab)
