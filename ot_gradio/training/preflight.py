"""The trainer's re-check, when it loads, of two things the start checks (runner/startcheck.py, the
one list `validate`, `train` and the page's Start run) found fine: the concept folders and the
output and backup folders, which may have changed since (a queued run, a folder removed after
Start), or were never checked (a Trainer built directly). A problem fails in seconds, not after
minutes of model loading or hours of training. TrainingError: a problem the user can fix."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


class TrainingError(Exception):
    """A problem the user can fix; the message says what and where."""


def check_concepts(config: Any) -> None:
    """At least one enabled concept, and every enabled concept's folder exists."""
    enabled = [c for c in config.concepts if c.enabled]
    if not enabled:
        raise TrainingError("concepts: there is no enabled concept; add a folder of training images")
    for i, concept in enumerate(enabled):
        if not Path(concept.path).is_dir():
            raise TrainingError(
                f"concepts[{i}] '{concept.name or concept.path}': folder {concept.path} does not exist; fix the path"
            )


def check_writable(config: Any, backup_dir: Path) -> None:
    """The output file's folder and the backups' folder can be written."""
    for label, folder in (
        ("output_model_destination", Path(config.output_model_destination).expanduser().parent),
        ("workspace_dir (backups)", Path(backup_dir).parent),
    ):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".ot-gradio-write-test-"):
                pass
        except OSError as err:
            raise TrainingError(
                f"{label}: cannot write to {folder} ({err.strerror or err}); choose a folder you can write to"
            ) from err
