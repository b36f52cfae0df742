"""No run writes over another run's model. Queued runs of one config all wrote the same output
file, each over the one before, silently; OneTrainer overwrites too, but a page that queues runs
must not lose one. A run whose output file an earlier run already wrote, or a queued or running
run will write, gets the next free numbered name (`name-2.safetensors`, `name-3` ...), said in
the queue's message, in the run's log and in the Runs list (its config holds the name it wrote).

A run that continues from its last backup keeps its output file: it continues that model.
Torch-free (the page and the queue call it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..fsutil import numbered

FIELD = "output_model_destination"


def _key(path: str) -> str:
    try:
        return str(Path(path).expanduser().resolve())
    except (OSError, ValueError, RuntimeError):
        return path


def _exists(path: str) -> bool:
    try:
        return Path(path).expanduser().exists()
    except (OSError, ValueError):
        return False


def destination(config: dict[str, Any]) -> str:
    return str(config.get(FIELD) or "").strip()


def claim_output(config: dict[str, Any], claimed: Iterable[str] = ()) -> tuple[dict[str, Any], str]:
    """(the config with a free output file, a note saying what was renamed and why, or "").
    `claimed`: the output files of queued and running runs; a file on disk is taken too."""
    dest = destination(config)
    if not dest or config.get("continue_last_backup"):
        return config, ""
    taken = {_key(c) for c in claimed if c}

    def free(path: str) -> bool:
        return _key(path) not in taken and not _exists(path)

    if free(dest):
        return config, ""
    chosen = next(numbered(dest, n) for n in range(2, 100_000) if free(numbered(dest, n)))
    why = "an earlier run wrote it" if _exists(dest) else "a queued or running run will write it"
    note = (f"Output file: {dest} is taken ({why}); this run writes {chosen} instead, "
            "so no run's model is overwritten")
    return {**config, FIELD: chosen}, note
