"""Continue from last backup past damaged backups. A backup can have its COMPLETE marker and still
not load: a copy to or from Drive interrupted after the marker (cp and rsync copy it first), a bad
disk. Each such backup of this training is named with what is wrong and skipped, and the run
continues from the next older complete one (resume.py says which); with none readable left, the
run stops naming them instead of starting anew, which would throw away the training they hold."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..fsutil import same_output
from .backup import MOVE_IT, UnreadableBackup, complete_backups, damaged_backups, saved_output
from .preflight import TrainingError
from .resume import Resumed, resume_from_latest_backup

if TYPE_CHECKING:
    from .run_state import RunState


def shown(backup: Path) -> str:
    return f"{backup.parent.parent.name}/{backup.name}"  # <run>/<backup>


def _maybe_ours(backup: Path, dest: str) -> bool:
    """A damaged backup that may be of the training saving to `dest` (its config unreadable: may be)."""
    saved = saved_output(backup)
    return not saved or same_output(saved, dest)


def resume_past_damaged(run_state: Callable[[], RunState]) -> Resumed | None:
    """resume_from_latest_backup, skipping (and saying) each backup of this training that cannot be read."""
    said: set[Path] = set()
    while True:
        run = run_state()
        runs, dest = run.paths.other_runs, run.config.output_model_destination
        damaged = [(b.resolve(), why) for b, why in damaged_backups(runs) if _maybe_ours(b, dest)]
        for backup, why in damaged:
            if backup not in said:
                said.add(backup)
                run.report.warning(f"continue_last_backup: the backup {shown(backup)} cannot be read ({why}), so it is "
                                   f"skipped: {MOVE_IT} ({backup})")
        readable = any(same_output(saved_output(b), dest) for r in runs for b in complete_backups(Path(r) / "backup"))
        if damaged and not readable:
            names = "; ".join(f"{backup} ({why})" for backup, why in damaged)
            raise TrainingError(f"continue_last_backup: no backup of this training can be read: {names}. Move them out of "
                                "the workspace or delete them to start the training anew, or turn off 'Continue from last backup'")
        try:
            return resume_from_latest_backup(run)
        except UnreadableBackup as err:
            if err.backup.resolve() in said:
                raise  # found damaged twice: never loop
            # read_backup recorded it as damaged: the next turn names it and takes the next older one
