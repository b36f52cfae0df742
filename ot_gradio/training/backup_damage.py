"""Damaged backups: a folder with the COMPLETE marker whose files cannot be read (a copy to or from
Drive interrupted after the marker, which cp and rsync copy first; a bad disk).

`backup_problem` finds most by reading headers only (a few KB): a missing, empty or cut-off file, a
config that is no JSON. A file damaged inside is found when backup.py's `read_backup` loads it,
which raises `unreadable(...)`: that records the verdict here, so the folder is left out of the
complete backups from then on. Nothing here deletes a folder: the user decides.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

from ot_gradio.fsutil import BACKUP_MARKER as MARKER

FILES = ("trainable.safetensors", "state.pt", "config.json")  # what backup.py writes in each backup
MOVE_IT = "move it out of the workspace or delete it"

# verdicts by folder, valid while its files are unchanged (size and time): a problem or None
_VERDICTS: dict[Path, tuple[tuple, str | None]] = {}


def _signature(backup: Path) -> tuple:
    out = []
    for name in (*FILES, MARKER):
        try:
            st = (backup / name).stat()
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def backup_problem(backup: Path) -> str | None:
    """What makes a marked backup unreadable, or None: it looks whole (a file damaged inside is
    found when `read_backup` loads it, which records it here)."""
    backup = Path(backup)
    key, sig = backup.resolve(), _signature(backup)
    known = _VERDICTS.get(key)
    if known is not None and known[0] == sig:
        return known[1]
    problem = _look_at(backup)
    _VERDICTS[key] = (sig, problem)
    return problem


def _look_at(backup: Path) -> str | None:
    for name in FILES:
        if not (backup / name).is_file():
            return f"{name} is missing"
        if (backup / name).stat().st_size == 0:
            return f"{name} is empty"
    try:
        config = json.loads((backup / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"config.json cannot be read ({err})"
    if not isinstance(config, dict):
        return "config.json holds no config"
    try:
        return _safetensors_problem(backup / "trainable.safetensors") or _state_problem(backup / "state.pt")
    except OSError as err:
        return f"its files cannot be read ({err})"


def _safetensors_problem(file: Path) -> str | None:
    size = file.stat().st_size
    with open(file, "rb") as fh:
        head = fh.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if length < 2 or 8 + length > size:
            return f"trainable.safetensors is cut off ({size} bytes, its header is incomplete)"
        try:
            header = json.loads(fh.read(length))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "trainable.safetensors has a damaged header"
    if size != 8 + length + end:
        return f"trainable.safetensors is cut off ({size} of {8 + length + end} bytes)"
    return None


def _state_problem(file: Path) -> str | None:
    try:
        with zipfile.ZipFile(file) as archive:  # torch.save's format: a zip whose directory is at the end
            if not any(n.endswith("data.pkl") for n in archive.namelist()):
                return "state.pt is no torch file"
    except (zipfile.BadZipFile, EOFError, ValueError):
        return f"state.pt is cut off or damaged ({file.stat().st_size} bytes, no complete zip directory)"
    return None


class UnreadableBackup(ValueError):
    """A marked backup that cannot be loaded; the message names its folder and what is wrong."""

    def __init__(self, backup: Path, problem: str):
        self.backup, self.problem = Path(backup), problem
        super().__init__(f"backup {backup} cannot be read: {problem}; {MOVE_IT}")


def unreadable(backup: Path, problem: str) -> UnreadableBackup:
    """The error for a backup that failed to load, recorded so that it is left out from now on."""
    _VERDICTS[Path(backup).resolve()] = (_signature(backup), problem)
    return UnreadableBackup(backup, problem)
