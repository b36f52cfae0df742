"""Which training a run's backups are of. A fresh run (not continued from a backup) starts a new
training with a new id; a run continued from a backup carries on the backup's training and its id.
Each backup holds the id in its marker (backup.py), so rolling backups (backup_prune.py) delete this
training's older backups only, never those of another training that happens to save to the same
file (runner/outputs.py gives a fresh run the earlier run's output name when that run never wrote
it: one stopped by an error before its save).

The run records its training in `training.json` in its folder: the id, and the backup it continued.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ot_gradio.fsutil import atomic_write_json

from .backup import marker_training

if TYPE_CHECKING:
    from .run_state import RunPaths

RECORD = "training.json"


@dataclass(frozen=True)
class Training:
    id: str
    continued_from: Path | None = None  # the backup this run continued (resolved)


def _record(paths: RunPaths) -> Path:
    return (paths.run or paths.backup.parent) / RECORD


def _write(paths: RunPaths, training: Training) -> Training:
    data = {"training": training.id, "continued_from": str(training.continued_from or "")}
    atomic_write_json(_record(paths), data, indent=2)
    return training


def run_training(paths: RunPaths) -> Training:
    """This run's training: the one `continue_training` recorded, or else a new one, recorded now so
    that all the run's backups carry the same id."""
    try:
        data = json.loads(_record(paths).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("training"), str) and data["training"]:
        continued = data.get("continued_from")
        return Training(data["training"], Path(continued) if isinstance(continued, str) and continued else None)
    return _write(paths, Training(uuid.uuid4().hex))


def continue_training(paths: RunPaths, backup: Path) -> Training:
    """The run continues `backup`: it is of the backup's training. A backup written before markers
    held the id (or whose marker cannot be read) gives a new id; rolling backups still count it, as
    the backup this run continued."""
    return _write(paths, Training(marker_training(backup) or uuid.uuid4().hex, Path(backup).resolve()))
