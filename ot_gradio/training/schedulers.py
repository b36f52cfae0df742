"""The torch learning-rate scheduler of a run, from the schedule shapes in config/lr_schedules.py
(the page plots the same curve from there)."""

from __future__ import annotations

from ..config.enums import LearningRateScheduler as S
from ..config.lr_schedules import lr_factor, warmup_steps


def create_scheduler(optimizer, scheduler: S, total_steps: int, warmup: float, cycles: float, min_factor: float, *,
                     config=None, steps_per_epoch: int | None = None):
    """The torch LR scheduler. ``config`` (the TrainConfig) is needed for CUSTOM (its class and
    parameters) and makes schedule-free optimizers run at a constant rate without warmup, as in OneTrainer."""
    import torch  # noqa: PLC0415

    from ..config.optimizer import SCHEDULE_FREE  # noqa: PLC0415

    if config is not None and config.optimizer.optimizer in SCHEDULE_FREE:
        scheduler, warmup = S.CONSTANT, 0.0
    lr_factor(scheduler, 0, max(1, total_steps), warmup, cycles, min_factor)  # fail early on a bad name
    if scheduler == S.ADAFACTOR:
        from .scheduler_classes import AdafactorSchedule  # noqa: PLC0415

        return AdafactorSchedule(optimizer)
    if scheduler == S.CUSTOM:
        from .scheduler_classes import custom_scheduler  # noqa: PLC0415

        if config is None:
            raise ValueError("custom_learning_rate_scheduler: the CUSTOM scheduler needs the config (its class and scheduler_params)")
        per_epoch = steps_per_epoch or 1
        warm = warmup_steps(warmup, total_steps)
        # %SCHEDULER_STEPS%: the steps the class runs, after the warmup (OneTrainer's total - warmup)
        placeholders = {"%LR%": config.learning_rate, "%EPOCHS%": config.epochs, "%STEPS_PER_EPOCH%": per_epoch,
                        "%TOTAL_STEPS%": total_steps, "%SCHEDULER_STEPS%": max(1, total_steps - warm)}
        return custom_scheduler(optimizer, config.custom_learning_rate_scheduler, config.scheduler_params, placeholders, warm)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(scheduler, step, max(1, total_steps), warmup, cycles, min_factor)
    )
