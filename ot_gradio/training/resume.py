"""`continue_last_backup`: the trainer picks up the newest complete backup of this training in the
workspace (model weights of the method, optimizer, scheduler, grad scaler, EMA, RNG states and
counters), after checking it was made with the settings that decide its shapes and data order.

A workspace holds the runs of every training started in it (a queue of two characters, last
week's style). "This training" is the one that saves to this run's output file: a backup of a run
with another output file is never taken (it would train on another model and save it under this
name), and when the workspace has backups of other trainings only, the run stops and names the
newest. An earlier start of the same config whose output was given a numbered name
(runner/outputs.py: `name-2.safetensors`) is the same training, and the continued run saves to
that name again, not over the file the number avoided."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.enums import TrainingMethod
from ..config.fields import iter_fields
from ..config.include_parts import excluded_parts
from ..config.migrations import migrate
from ..config.schema import TrainConfig
from ..config.validation import ConfigError
from ..fsutil import same_output
from .backup import (
    Counters,
    backup_order,
    complete_backups,
    epoch_length,
    newest_backup,
    read_backup,
    saved_output,
    set_rng_state,
)
from .ema import EMA
from .preflight import TrainingError
from .resume_changes import UNSET, at, changed_settings
from .resume_optimizer import continue_optimizer, plain
from .resume_text import shown

if TYPE_CHECKING:
    from .run_state import RunState

# settings a backup must share with the run that continues it: the schema's `backup_must_match`
# (True, or a rule on the config: a LoRA's structure, for the LORA method and the parts its LoRA trains only)
_MUST_MATCH = {f.path: f for f in iter_fields(TrainConfig) if f.backup_must_match}
MUST_MATCH = tuple(_MUST_MATCH)


@dataclass
class Resumed:
    """What the run continues with: the backup's counters, and the EMA (a fresh one when the
    backup has none); and the backup it continues, with its config (`old`: its JSON)."""

    counters: Counters
    ema: EMA | None
    backup: Path | None = None
    old: dict[str, Any] | None = None


def find_backup(run_dirs: list[Path], dest: str) -> Path | None:
    """The newest complete backup of the training that saves to `dest` (or a numbered name of
    it); None when the workspace has none at all; a TrainingError naming the newest when the
    workspace has backups of other trainings only."""
    backups = sorted((b for r in run_dirs for b in complete_backups(Path(r) / "backup")), key=backup_order, reverse=True)
    if not backups:
        return None
    found = newest_backup(b for b in backups if same_output(saved_output(b), dest))
    if found is None:
        other = saved_output(backups[0])
        raise TrainingError(
            f"continue_last_backup: no backup in this workspace is of a run that saves to {dest}; the newest, "
            f"{shown(backups[0])}, is of a run that saves to {other or 'another file'}. To continue that training, set "
            f"Output to {other or 'its file'}; to start this one, turn off 'Continue from last backup'")
    return found


def _same_file(a: str, b: str) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def _concept_folders(config: dict[str, Any]) -> list[str]:
    """The enabled concepts' folders, with the Captions file a folder's images and captions come from."""
    def named(concept: dict[str, Any]) -> str:
        text = concept.get("text") if isinstance(concept.get("text"), dict) else {}
        return f" (Captions file {text['captions_file']})" if str(text.get("captions_file") or "").strip() else ""

    return sorted(str(c.get("path") or "") + named(c) for c in config.get("concepts") or [] if isinstance(c, dict) and c.get("enabled", True))


def backup_config(old: dict[str, Any]) -> dict[str, Any]:
    """A backup's config as this version reads it (an earlier version's layout migrated, so an
    older fine-tune's layer preset means what it trained with); as it is where it cannot be."""
    try:
        return migrate(old)
    except ConfigError:
        return old


def must_match_problems(old: dict[str, Any], config: TrainConfig) -> list[str]:
    """The settings that make the backup (its config `old`) impossible to continue with `config`:
    "path=<backup's> (Label) but this run has path=<this run's>". A setting the backup's config lacks
    (an older version's) counts as its default."""
    now = config.model_dump(mode="json")
    problems = []
    for path, field in _MUST_MATCH.items():
        rule = field.backup_must_match
        if rule is not True and not (rule(now) or rule(old)):
            continue
        before, after = at(old, path), at(now, path)
        before = plain(field.default) if before is UNSET else plain(before)
        if before != plain(after):
            label = f" ({field.label})" if field.label else ""
            problems.append(f"{path}={before!r}{label} but this run has {path}={plain(after)!r}")
    return problems


def left_out_problems(trainable: Iterable[str], config: TrainConfig) -> list[str]:
    """The parts whose weights the backup holds (its trainable keys `<part>.<weight>`) but this run
    leaves out (`<part>.include` off): loading would skip them, and the saved model would lack them."""
    kind = "LoRA weights" if TrainingMethod(config.training_method) == TrainingMethod.LORA else "trained weights"
    keys = tuple(trainable)
    return [f"the backup holds {part} {kind}, but {part} is left out of this run ({part}.include off): they would not be "
            f"used and the saved model would lack them; turn {part}.include on to keep them"
            for part in excluded_parts(config) if any(k.startswith(part + ".") for k in keys)]


def resume_from_latest_backup(run: RunState) -> Resumed | None:
    """Load the newest backup of this training into the model, optimizer, scheduler, grad scaler,
    EMA and RNGs; None (with a warning) when the workspace has no complete backup yet."""
    found = find_backup(run.paths.other_runs, run.config.output_model_destination)
    if found is None:
        run.report.warning("continue_last_backup: no complete backup in this workspace yet; starting a new run")
        return None
    backup = read_backup(found)
    old = backup_config(backup.config)
    problems = must_match_problems(old, run.config)
    if problems:
        raise TrainingError(
            f"continue_last_backup: the backup {found} was made with {', and with '.join(problems)}; a backup continues "
            f"only with the settings it was made with: change {'it' if len(problems) == 1 else 'them'} back or turn off "
            "'Continue from last backup'"
        )
    left_out = left_out_problems(backup.trainable, run.config)
    if left_out:
        raise TrainingError(f"continue_last_backup: {'; '.join(left_out)}, or turn off 'Continue from last backup' "
                            f"(backup {shown(found)})")
    run.method.load_trainable_state(run.model, backup.trainable)
    for line in continue_optimizer(run.optimizer, run.scheduler, backup.state, old, run.config, backup.counters.global_step):
        run.report.warning(line)
    for line in changed_settings(old, run.config, backup.counters, epoch_length(found, backup.counters, run.steps_in_epoch)):
        run.report.warning(line)
    if run.precision.scaler is not None and backup.state.get("scaler"):
        run.precision.scaler.load_state_dict(backup.state["scaler"])
    ema = run.ema
    if ema is not None:
        if backup.state.get("ema"):
            ema.load_state_dict(backup.state["ema"])
        else:
            ema = EMA(run.trained_params, run.config.ema_decay, run.config.ema_update_step_interval, ema.device)
            run.report.warning("ema: the backup has no EMA weights (EMA was off); the average starts from the backup's weights")
    if backup.counters.epoch >= run.config.epochs:  # (a run killed between its last backup and its save: saved now)
        run.report.warning(
            f"continue_last_backup: the backup {shown(found)} has trained {backup.counters.epoch} epoch(s) (step "
            f"{backup.counters.global_step}), and this run's Epochs is {run.config.epochs}: nothing is left to train, the "
            "model is saved as the backup has it. Raise Epochs to train it on")
    set_rng_state(backup.state["rng"])
    saved_to = str(old.get("output_model_destination") or "")
    if saved_to and not _same_file(saved_to, run.config.output_model_destination):  # the numbered name of an earlier start
        run.config.output_model_destination = saved_to
        run.report.warning(f"continue_last_backup: the backup's run saved to {saved_to}, so this run saves there too (not over "
                           "the file whose name the number kept free)")
    before, now = _concept_folders(old), _concept_folders(run.config.model_dump(mode="json"))
    if before != now:
        run.report.warning(f"continue_last_backup: the backup {shown(found)} trained on the concept folders "
                           f"{', '.join(before) or 'none'}; this run trains on {', '.join(now) or 'none'}")
    run.report.status("training", f"continuing from backup {found.name} (run {found.parent.parent.name}) at step "
                                  f"{backup.counters.global_step}")
    return Resumed(backup.counters, ema, found, old)
