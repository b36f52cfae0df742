"""Rolling backups: keep the newest N complete backups of a training across all the runs that
continued it (each resume is a new run folder, so N per run would fill the disk), never another
training's, never the one just written, never a damaged one: the user decides about those.

A backup is of this run's training when its marker holds the training's id (backup_training.py).
A backup written before markers held one is counted only when it lies in this run's own backup
folder or is the backup this run continued; any other, and one whose marker cannot be read, stays.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .backup import MARKER, complete_backups, marker_training, step_order
from .backup_training import Training


@dataclass
class Pruned:
    deleted: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)  # a folder that could not be deleted, and why


def is_of(backup: Path, training: Training, own: Path) -> bool:
    """Whether `backup` is of `training`; `own`: this run's backup folder."""
    found = marker_training(backup)
    if found:
        return found == training.id
    backup = backup.resolve()
    return found == "" and (backup.parent == own.resolve() or backup == training.continued_from)


def prune_backups(run_dirs: list[Path], newest: Path, keep: int, training: Training) -> Pruned:
    """Delete all but the `keep` newest complete backups of `training` in `run_dirs`; `newest` (the
    one just written, in this run's own folder) always stays."""
    newest = Path(newest).resolve()
    ours = [b for r in dict.fromkeys(Path(r).resolve() for r in run_dirs) for b in complete_backups(r / "backup")
            if b.resolve() != newest and is_of(b, training, newest.parent)]
    ours.sort(key=step_order, reverse=True)  # all of one training
    pruned = Pruned()
    for old in ours[max(keep - 1, 0):]:
        try:
            (old / MARKER).unlink()  # first: a folder left half deleted is no backup, and the next run removes it
        except OSError as err:
            pruned.failed.append((old, _said(err)))
            continue
        try:
            shutil.rmtree(old)
        except OSError as err:
            pruned.failed.append((old, f"{_said(err)}; its {MARKER} marker is deleted, so it is no backup any more"))
        else:
            pruned.deleted.append(old)
    return pruned


def _said(err: OSError) -> str:
    where = f" ({err.filename})" if err.filename else ""
    return f"{err.strerror or err}{where}"
