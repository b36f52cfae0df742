"""Continue from last backup past damaged backups. A backup can have its COMPLETE marker and still
not load: a copy to or from Drive interrupted after the marker (cp and rsync copy it first), a bad
disk. Each such backup of this training is named with what is wrong and skipped, and the run
continues from the next older complete one (resume.py says which); with none readable left, the
run stops naming them instead of starting anew, which would throw away the training they hold.
A damaged backup that does not say which training it is of (no readable config.json, and no
training id shared with a backup of this training) is named and left out, and never stops the run.

The run that continues a backup records it, and carries on its training (backup_training.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..fsutil import same_output
from .backup import complete_backups, damaged_backups, marked_backups, marker_training, saved_output
from .backup_damage import MOVE_IT, UnreadableBackup
from .backup_training import continue_training
from .preflight import TrainingError
from .resume import Resumed, resume_from_latest_backup
from .resume_text import shown

if TYPE_CHECKING:
    from .run_state import RunState


def sort_damaged(runs: list[Path], dest: str) -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """The damaged backups that are of the training saving to `dest` (their config says so, or
    their marker holds the id of a backup whose config does), and those that do not say whose they
    are (config unreadable); each with what is wrong, newest first. Other trainings' are left out."""
    ids = {marker_training(b) for r in runs for b in marked_backups(Path(r) / "backup") if same_output(saved_output(b), dest)}
    ids -= {"", None}
    ours, unknown = [], []
    for backup, why in damaged_backups(runs):
        saved = saved_output(backup)
        if same_output(saved, dest) or marker_training(backup) in ids:
            ours.append((backup.resolve(), why))
        elif not saved:
            unknown.append((backup.resolve(), why))
    return ours, unknown


def resume_past_damaged(run_state: Callable[[], RunState]) -> Resumed | None:
    """resume_from_latest_backup, skipping (and saying) each backup of this training that cannot be read."""
    said: set[Path] = set()
    while True:
        run = run_state()
        runs, dest = run.paths.other_runs, run.config.output_model_destination
        ours, unknown = sort_damaged(runs, dest)
        for (backup, why), whose in [*((d, "") for d in ours), *((d, " and does not say which training it is of") for d in unknown)]:
            if backup not in said:
                said.add(backup)
                run.report.warning(f"continue_last_backup: the backup {shown(backup)} cannot be read ({why}){whose}, so it "
                                   f"is skipped: {MOVE_IT} ({backup})")
        readable = any(same_output(saved_output(b), dest) for r in runs for b in complete_backups(Path(r) / "backup"))
        if ours and not readable:
            names = "; ".join(f"{backup} ({why})" for backup, why in ours)
            raise TrainingError(f"continue_last_backup: no backup of this training can be read: {names}. Move them out of "
                                "the workspace or delete them to start the training anew, or turn off 'Continue from last backup'")
        try:
            resumed = resume_from_latest_backup(run)
        except UnreadableBackup as err:
            if err.backup.resolve() in said:
                raise  # found damaged twice: never loop
            # read_backup recorded it as damaged: the next turn names it and takes the next older one
            continue
        if resumed is not None and resumed.backup is not None and run.dist.is_main:
            continue_training(run.paths, resumed.backup)
        return resumed
