"""Progress as a run starts its steps: a run resumed from the backup of its last step makes no
step, and still reports where it is (the page's bars and the CLI's bar start there)."""

from __future__ import annotations

from ot_gradio.cli import _Console
from ot_gradio.training.step_log import LossLog


class _Report:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def progress(self, **fields) -> None:
        self.events.append({"type": "progress", **fields})


def test_training_reports_where_it_starts():
    report = _Report()
    LossLog(report).start(60, epochs=2, steps_per_epoch=30, total_steps=60, epoch=2, epoch_step=0)  # resumed at the end
    assert report.events == [{"type": "progress", "phase": "training", "epoch": 2, "epochs": 2, "step": 0, "steps_per_epoch": 30,
                              "global_step": 60, "total_steps": 60, "it_s": None, "eta_s": None}]


def test_the_cli_bar_starts_at_the_first_reported_step():
    console = _Console()
    report = _Report()
    LossLog(report).start(10, epochs=1, steps_per_epoch=20, total_steps=20, epoch=0, epoch_step=10)  # resumed half-way
    console.on_event(report.events[0])
    assert console.bar.n == 10
    console.on_event({**report.events[0], "global_step": 11, "step": 11})
    assert console.bar.n == 11
    console.bar.close()
