"""Learning-rate schedule shapes: one registry entry per scheduler, each a pure function of progress.

The factor multiplies the base learning rate of every parameter group. Warmup and the minimum
factor are applied around every schedule the same way, so the page's LR plot and the trainer
compute the very same curve (`lr_factor` is pure Python, no torch). ADAFACTOR and CUSTOM are
objects whose learning rate is only known while training (training/scheduler_classes.py); their plot is flat. training/schedulers.py makes the torch
scheduler from these; the page plots `lr_curve` (this module imports no torch).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .enums import LearningRateScheduler as S

ScheduleFn = Callable[[float, float], float]  # (progress in [0, 1], cycles) -> factor
SCHEDULES: dict[S, ScheduleFn] = {}


def register(name: S) -> Callable[[ScheduleFn], ScheduleFn]:
    def wrap(fn: ScheduleFn) -> ScheduleFn:
        SCHEDULES[name] = fn
        return fn

    return wrap


@register(S.CONSTANT)
def constant(progress: float, cycles: float) -> float:
    return 1.0


@register(S.LINEAR)
def linear(progress: float, cycles: float) -> float:
    return 1.0 - progress


@register(S.COSINE)
def cosine(progress: float, cycles: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * progress))


@register(S.COSINE_WITH_RESTARTS)
def cosine_with_restarts(progress: float, cycles: float) -> float:
    """Smooth cosine waves: down and back up `cycles` times (transformers' num_cycles = cycles)."""
    return 0.5 * (1.0 + math.cos(2.0 * math.pi * cycles * progress))


@register(S.COSINE_WITH_HARD_RESTARTS)
def cosine_with_hard_restarts(progress: float, cycles: float) -> float:
    """Cosine decay to the minimum, then a jump back to the full rate, `cycles` times."""
    if progress >= 1.0:
        return 0.0
    return 0.5 * (1.0 + math.cos(math.pi * ((cycles * progress) % 1.0)))


@register(S.REX)
def rex(progress: float, cycles: float) -> float:
    """Reflected exponential (REX, arXiv 2107.04197) as OneTrainer's: z / (0.1 + 0.9 z) with
    z = 1 - progress."""
    z = 1.0 - progress
    return z / (0.1 + 0.9 * z)


@register(S.ADAFACTOR)
def adafactor(progress: float, cycles: float) -> float:
    """Adaptive Adafactor computes its own learning rate as it goes, which no formula here can know:
    the plot shows the initial learning rate, flat. There is no warmup (as in OneTrainer)."""
    return 1.0


@register(S.CUSTOM)
def custom(progress: float, cycles: float) -> float:
    """A class of the user's (custom_learning_rate_scheduler): the plot shows the warmup, then the
    base learning rate, flat, because the curve is only known once the class runs."""
    return 1.0


NO_WARMUP = {S.ADAFACTOR}


def warmup_steps(warmup: float, total_steps: int) -> int:
    """OneTrainer's reading: above 1 a step count; from 0 to 1 (1 included: the whole run) a
    fraction of all steps, rounded down."""
    if warmup <= 0:
        return 0
    return int(warmup * total_steps) if warmup <= 1 else int(warmup)


def warmup_option(steps: float) -> float:
    """Another trainer's warmup of `steps` whole steps as the option holds it: 1 step is 0, since
    the option reads 1 as the whole run (its single step would be at rate 0 anyway)."""
    return 0.0 if steps == 1 else float(steps)


def lr_factor(
    scheduler: S, step: int, total_steps: int, warmup: float = 0.0, cycles: float = 1.0, min_factor: float = 0.0
) -> float:
    """Factor of the base LR at optimizer step `step` (0-based) of a run of `total_steps`."""
    if scheduler not in SCHEDULES:
        raise ValueError(
            f"learning_rate_scheduler: {scheduler} is not available yet; use one of {', '.join(s.value for s in SCHEDULES)}"
        )
    if scheduler in NO_WARMUP:
        return 1.0
    n_warm = warmup_steps(warmup, total_steps)
    if step < n_warm:  # from 0 at the first step, as OneTrainer's and diffusers' warmups
        return step / n_warm
    span = max(1, total_steps - n_warm)
    progress = min(1.0, max(0.0, (step - n_warm) / span))
    factor = SCHEDULES[scheduler](progress, cycles)
    return min_factor + (1.0 - min_factor) * max(0.0, factor)


def lr_curve(scheduler: S, total_steps: int, warmup: float, cycles: float, min_factor: float, base_lr: float) -> list[float]:
    return [base_lr * lr_factor(scheduler, s, total_steps, warmup, cycles, min_factor) for s in range(total_steps)]
