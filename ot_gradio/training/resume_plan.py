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
from .backup import Counters, epoch_length, marker_plan
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
    length = epoch_length(resumed.backup, resumed.counters, steps_in_epoch)
    plan = marker_plan(resumed.backup)
    for line in [*plan_warnings(plan, resumed.old or {}, config, resumed.counters, length),
                 *step_warnings(plan, resumed.old or {}, config)]:
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
        drew = "drew" if plan else "may have drawn"  # (a marker without one: any version before plan 3)
        why = (f"{where} and was written by an earlier version of this program ({written}; this version's is {PLAN_VERSION}), "
               f"which {drew} an epoch's images differently for these settings: "
               + "; ".join(f"{c.what} ({c.affects})" for c in changes))
    return [f"{LEAD}{why}. The rest of epoch {epoch} is drawn by this version's plan, so some of its images may train twice "
            f"and others not at all this epoch; later epochs are unaffected"]


def step_warnings(plan: int, old: dict[str, Any], config: TrainConfig) -> list[str]:
    """What a backup written before data plan 3 (its marker holds none: the same version changed
    these) trained otherwise than this version continues it, for the backup's settings `old`, kept
    by this run `config`; [] for a newer backup or settings none of the changes touches."""
    if plan:
        return []
    now = config.model_dump(mode="json")
    said = []
    forced = any(old.get(k) or now.get(k) for k in ("force_v_prediction", "force_epsilon_prediction"))
    if old.get("rescale_noise_scheduler_to_zero_terminal_snr") and now.get("rescale_noise_scheduler_to_zero_terminal_snr") \
            and not forced and now.get("model_type") not in ("STABLE_DIFFUSION_20", "STABLE_DIFFUSION_21"):
        said.append("zero terminal SNR now trains v-prediction, as OneTrainer; the earlier version kept an epsilon model's "
                    "own prediction, so a backup of one trained epsilon: turn Force epsilon prediction on to continue it as it trained")
    if old.get("learning_rate_scheduler") == "REX" and now.get("learning_rate_scheduler") == "REX":
        said.append("REX now follows OneTrainer's curve (higher through the run: 0.91 of the rate halfway, was 0.67)")
    if float(old.get("learning_rate_warmup_steps") or 0) == 1:
        said.append("a warmup of 1 is now the whole run (OneTrainer's fraction), not one step")
    if old.get("dynamic_timestep_shifting") and float(old.get("timestep_shift") or 1) != 1:
        said.append("Dynamic timestep shifting now replaces Timestep shift (OneTrainer's), where it multiplied it")
    return [f"{LEAD}the backup was written by an earlier version, which trained these settings otherwise: "
            + "; ".join(said) + ". This run continues with this version's"] if said else []
