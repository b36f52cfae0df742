"""`continue_last_backup`: the trainer picks up the newest complete backup of the workspace
(model weights of the method, optimizer, scheduler, grad scaler, EMA, RNG states and counters),
after checking it was made with the settings that decide its shapes and data order."""

from __future__ import annotations

from typing import Any

from ..config.fields import iter_fields
from ..config.schema import TrainConfig
from .backup import latest_backup, read_backup, set_rng_state
from .ema import EMA
from .preflight import TrainingError

# settings a backup must share with the run that continues it: the schema's `backup_must_match`
MUST_MATCH = tuple(f.path for f in iter_fields(TrainConfig) if f.backup_must_match)


def resume_from_latest_backup(trainer: Any) -> None:
    found = latest_backup(trainer.paths.other_runs)
    if found is None:
        trainer.report.warning("continue_last_backup: no complete backup in this workspace yet; starting a new run")
        return
    backup = read_backup(found)
    old = backup.config
    for key in MUST_MATCH:
        if str(old.get(key)) != str(getattr(trainer.config, key)):
            raise TrainingError(
                f"continue_last_backup: the backup {found} was made with {key}={old.get(key)!r} but this run has "
                f"{key}={getattr(trainer.config, key)!r}; change it back or turn off 'Continue from last backup'"
            )
    trainer.method.load_trainable_state(trainer.model, backup.trainable)
    trainer.optimizer.load_state_dict(backup.state["optimizer"])
    trainer.scheduler.load_state_dict(backup.state["scheduler"])
    if trainer.precision.scaler is not None and backup.state.get("scaler"):
        trainer.precision.scaler.load_state_dict(backup.state["scaler"])
    if trainer.ema is not None:
        if backup.state.get("ema"):
            trainer.ema.load_state_dict(backup.state["ema"])
        else:
            trainer.ema = EMA(trainer.trained_params, trainer.config.ema_decay, trainer.config.ema_update_step_interval, trainer.ema.device)
            trainer.report.warning("ema: the backup has no EMA weights (EMA was off); the average starts from the backup's weights")
    set_rng_state(backup.state["rng"])
    trainer.counters = backup.counters
    trainer.report.status("training", f"continuing from backup {found.name} at step {trainer.counters.global_step}")
