"""`continue_last_backup`: the trainer picks up the newest complete backup of the workspace
(model weights of the method, optimizer, scheduler, grad scaler, EMA, RNG states and counters),
after checking it was made with the settings that decide its shapes and data order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config.fields import iter_fields
from ..config.schema import TrainConfig
from .backup import Counters, latest_backup, read_backup, set_rng_state
from .ema import EMA
from .preflight import TrainingError

if TYPE_CHECKING:
    from .run_state import RunState

# settings a backup must share with the run that continues it: the schema's `backup_must_match`
MUST_MATCH = tuple(f.path for f in iter_fields(TrainConfig) if f.backup_must_match)


@dataclass
class Resumed:
    """What the run continues with: the backup's counters, and the EMA (a fresh one when the
    backup has none)."""

    counters: Counters
    ema: EMA | None


def resume_from_latest_backup(run: RunState) -> Resumed | None:
    """Load the newest backup into the model, optimizer, scheduler, grad scaler, EMA and RNGs;
    None (with a warning) when the workspace has no complete backup yet."""
    found = latest_backup(run.paths.other_runs)
    if found is None:
        run.report.warning("continue_last_backup: no complete backup in this workspace yet; starting a new run")
        return None
    backup = read_backup(found)
    old = backup.config
    for key in MUST_MATCH:
        if str(old.get(key)) != str(getattr(run.config, key)):
            raise TrainingError(
                f"continue_last_backup: the backup {found} was made with {key}={old.get(key)!r} but this run has "
                f"{key}={getattr(run.config, key)!r}; change it back or turn off 'Continue from last backup'"
            )
    run.method.load_trainable_state(run.model, backup.trainable)
    run.optimizer.load_state_dict(backup.state["optimizer"])
    run.scheduler.load_state_dict(backup.state["scheduler"])
    if run.precision.scaler is not None and backup.state.get("scaler"):
        run.precision.scaler.load_state_dict(backup.state["scaler"])
    ema = run.ema
    if ema is not None:
        if backup.state.get("ema"):
            ema.load_state_dict(backup.state["ema"])
        else:
            ema = EMA(run.trained_params, run.config.ema_decay, run.config.ema_update_step_interval, ema.device)
            run.report.warning("ema: the backup has no EMA weights (EMA was off); the average starts from the backup's weights")
    set_rng_state(backup.state["rng"])
    run.report.status("training", f"continuing from backup {found.name} at step {backup.counters.global_step}")
    return Resumed(backup.counters, ema)
