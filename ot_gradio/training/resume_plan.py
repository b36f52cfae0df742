"""A backup whose data plan (data/plan_version.py) is another version's than this program's,
said on resume when it stopped inside an epoch: that epoch's first part was drawn by its plan and
the rest is drawn by this one's, so some of its images may train twice and others not at all. The
plan of each epoch is computed from its number and the seed, so later epochs are whole; a backup
at an epoch boundary continues as exactly as one of this version. Only the changes that can matter
for the backup's or this run's settings are named; when none can, nothing is said."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config.schema import TrainConfig
from ..data.plan_version import PLAN_VERSION, changes_since
from .backup import Counters, marker_plan
from .resume_optimizer import LEAD
from .run_state import Reporter

if TYPE_CHECKING:
    from .resume import Resumed


def say_plan_change(resumed: Resumed, config: TrainConfig, steps_in_epoch: Callable[[int], int], report: Reporter) -> None:
    """Warn (trainer_setup.py, after the resume) when the backup continued was drawn by another
    plan and stopped inside an epoch; `steps_in_epoch`: the batches of an epoch in this version's
    plan (the dataset's), so a backup written at the last batch of an epoch counts as its end."""
    if resumed.backup is None:
        return
    for line in plan_warnings(marker_plan(resumed.backup), resumed.old or {}, config, resumed.counters, steps_in_epoch):
        report.warning(line)


def plan_warnings(plan: int, old: dict[str, Any], config: TrainConfig, counters: Counters,
                  steps_in_epoch: Callable[[int], int] | None = None) -> list[str]:
    """The warning for a backup of plan version `plan` (0: written before markers held it) with
    config `old` and counters `counters`, continued by `config`; [] when it continues exactly."""
    if plan == PLAN_VERSION or not counters.epoch_step or counters.epoch >= config.epochs:
        return []
    if steps_in_epoch is not None and counters.epoch_step >= steps_in_epoch(counters.epoch):
        return []  # the epoch's last batch: nothing of it is left to draw
    epoch = counters.epoch + 1
    where = f"the backup stopped {counters.epoch_step} batch(es) into epoch {epoch}"
    if plan > PLAN_VERSION:
        why = (f"{where} and was written by a newer version of this program (data plan {plan}; this version's is "
               f"{PLAN_VERSION}), whose plan of an epoch (its images, their aspect buckets, their cached variations) may differ")
    else:
        changes = changes_since(plan, (old, config.model_dump(mode="json")))
        if not changes:
            return []
        written = f"data plan {plan}" if plan else "before backups recorded their data plan"
        why = (f"{where} and was written by an earlier version of this program ({written}; this version's is {PLAN_VERSION}), "
               "which drew an epoch's images differently for these settings: "
               + "; ".join(f"{c.what} ({c.affects})" for c in changes))
    return [f"{LEAD}{why}. The rest of epoch {epoch} is drawn by this version's plan, so some of its images may train twice "
            f"and others not at all this epoch; later epochs are unaffected"]
