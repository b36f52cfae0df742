"""What the loop reports after each optimizer step: progress, the loss and its smoothed value,
the learning rates, TensorBoard scalars; and the stop on a loss that is NaN or inf.

A step's loss may still be on the device when the step ends (`Trainer.defer_loss_reads`, on a
GPU): `LossLog.read` then reads every unread loss in one transfer and logs the steps in order,
with the epoch, step, time and learning rates each had when it ended, so the events are the
same as when each step is read at once, only later."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from .preflight import TrainingError


@dataclass
class StepLog:
    """An optimizer step's log line, taken when the step ends; `loss` may still be on the device."""

    loss: float | torch.Tensor
    image_paths: list[str]
    epoch: int  # 1-based, as shown
    epoch_step: int
    global_step: int
    time: float  # time.monotonic() at the end of the step
    lrs: dict[str, float]


def check_finite(value: float, step: int, image_paths: list[str], rank: int | None = None) -> None:
    """``rank``: the process whose images these are (multi-GPU), or None."""
    if not math.isfinite(value):
        where = "images" if rank is None else f"images of process {rank}"
        raise TrainingError(
            f"the loss became {value} at step {step} ({where}: {', '.join(image_paths)}); "
            "lower the learning rate or use FLOAT_32, and continue from the last backup"
        )


class LossLog:
    """The steps not logged yet, the smoothed loss, and the run's rate for the progress events."""

    def __init__(self, report: Any):
        self.report = report
        self.unread: list[StepLog] = []
        self.smoothed: float | None = None
        self.started = self.last_read = 0.0  # time.monotonic() when training started, at the last read
        self.steps_at_start = 0
        self.tb = None
        self.epochs = self.steps_per_epoch = self.total_steps = 0

    def start(self, global_step: int, epochs: int, steps_per_epoch: int, total_steps: int, tb: Any = None,
              epoch: int = 0, epoch_step: int = 0) -> None:
        """Training starts at `global_step` (`epoch`, 0-based, and `epoch_step`: where a resumed run
        continues). Its position is reported at once: a run resumed from a backup of its last step
        makes no step, and the page would otherwise show the caching phase as its last progress."""
        self.started = self.last_read = time.monotonic()
        self.steps_at_start, self.smoothed = global_step, None
        self.epochs, self.steps_per_epoch, self.total_steps, self.tb = epochs, steps_per_epoch, total_steps, tb
        self.report.progress(phase="training", epoch=min(epoch + 1, epochs), epochs=epochs, step=epoch_step,
                             steps_per_epoch=steps_per_epoch, global_step=global_step, total_steps=total_steps,
                             it_s=None, eta_s=None)

    def add(self, entry: StepLog) -> None:
        self.unread.append(entry)

    def read(self) -> None:
        """Read the unread steps' losses from the device in one transfer and log them in order."""
        if not self.unread:
            return
        pending, self.unread = self.unread, []
        on_device = [entry.loss for entry in pending if isinstance(entry.loss, torch.Tensor)]
        values = iter(torch.stack([t.float() for t in on_device]).tolist() if on_device else [])
        self.last_read = time.monotonic()
        for entry in pending:
            value = next(values) if isinstance(entry.loss, torch.Tensor) else entry.loss
            check_finite(value, entry.global_step, entry.image_paths)
            self.smoothed = value if self.smoothed is None else 0.95 * self.smoothed + 0.05 * value
            self._log(entry, value, self.smoothed)

    def _log(self, entry: StepLog, loss: float, smoothed: float) -> None:
        elapsed = max(1e-6, entry.time - self.started)
        rate = (entry.global_step - self.steps_at_start) / elapsed
        remaining = self.total_steps - entry.global_step
        self.report.progress(
            phase="training",
            epoch=entry.epoch,
            epochs=self.epochs,
            step=entry.epoch_step,
            steps_per_epoch=self.steps_per_epoch,
            global_step=entry.global_step,
            total_steps=self.total_steps,
            it_s=round(rate, 3),
            eta_s=round(remaining / rate, 1) if rate > 0 else None,
        )
        lrs = entry.lrs
        self.report.metrics(global_step=entry.global_step, loss=loss, smooth_loss=smoothed, lr=next(iter(lrs.values())), lrs=lrs)
        if self.tb is not None:
            self.tb.add_scalar("loss/train_step", loss, entry.global_step)
            self.tb.add_scalar("smooth_loss/train_step", smoothed, entry.global_step)
            for name, lr in lrs.items():
                self.tb.add_scalar(f"lr/{name}", lr, entry.global_step)
