"""Backups: everything needed to continue a run, written so a crash never leaves a backup that
looks complete.

A backup is a folder `backup/<time>-step<N>/` with `trainable.safetensors` (the trained weights),
`state.pt` (optimizer, scheduler, grad scaler, RNG states, counters), `config.json`, and a
`COMPLETE` marker written last. `state.pt` is read with torch's weights-only unpickler (tensors,
numbers, strings and numpy's random state), so a backup put in a workspace by someone else cannot
run code when the run resumes from it. It is assembled under a temporary name and renamed into place;
a folder without the marker is never picked for resume, and the next run started in the
workspace removes it (runner/rundir.py `remove_leftovers`).

A full disk raises fsutil.DiskFullError naming the folder, the space free and about the space a
backup needs; the half-written folder is removed first and earlier backups stay as they were.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ot_gradio.fsutil import BACKUP_MARKER as MARKER
from ot_gradio.fsutil import DiskFullError, as_disk_full, atomic_write_text, free_bytes, fsync_dir, fsync_file, tree_size

# The steps of a backup write, in order: a fault-injection pause can hold the writer after each.
STEPS = ("backup-started", "backup-trainable", "backup-state", "backup-config", "backup-written", "backup-renamed",
         "backup-marked")
INTACT = "; the earlier backups are intact"


@dataclass
class Counters:
    epoch: int = 0  # epochs fully done
    epoch_step: int = 0  # batches done in the current epoch
    global_step: int = 0  # optimizer steps done

    def as_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "epoch_step": self.epoch_step, "global_step": self.global_step}


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def fault_pause(point: str) -> None:
    """Fault injection for the crash tests: with OT_GRADIO_FAULT_PAUSE="<point>:<seconds>" the
    worker sleeps at that point of a backup write (one of STEPS), so a test can kill it there;
    with OT_GRADIO_FAULT_PAUSE_FILE set it also writes the point's name to that file first, so
    the test knows where the writer is held. Unset in normal use."""
    spec = os.environ.get("OT_GRADIO_FAULT_PAUSE", "")
    name, _, seconds = spec.partition(":")
    if name == point:
        flag = os.environ.get("OT_GRADIO_FAULT_PAUSE_FILE")
        if flag:
            Path(flag).write_text(point)
        time.sleep(float(seconds or 1))


def _tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in a nested state (a lower bound for its size on disk)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def backup_size(trainable: dict[str, torch.Tensor], state: dict[str, Any]) -> int:
    """About the bytes a backup of these takes (tensor data plus 1 MB of headers and RNG state)."""
    return _tensor_bytes(trainable) + _tensor_bytes(state) + 1024 * 1024


def write_backup(
    backup_root: Path,
    trainable: dict[str, torch.Tensor],
    state: dict[str, Any],
    config: dict[str, Any],
    counters: Counters,
    keep: int | None = None,
) -> Path:
    needed = backup_size(trainable, state)
    try:
        backup_root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        full = as_disk_full(err, backup_root, needed, "a backup in", hint=INTACT)
        if full is not None:
            raise full from err
        raise
    free = free_bytes(backup_root)
    if free is not None and free < needed:  # do not fill the disk with a backup that cannot fit
        raise DiskFullError(backup_root, free, needed, "a backup in", hint=INTACT)
    name = time.strftime("%Y%m%d-%H%M%S") + f"-step{counters.global_step}"
    final = backup_root / name
    if final.exists():
        name += f"-{os.getpid()}-{int(time.time() * 1000) % 1000}"
        final = backup_root / name
    tmp = backup_root / f".tmp-{name}"
    try:
        tmp.mkdir()
        fault_pause("backup-started")
        save_file({k: v.detach().contiguous().cpu() for k, v in trainable.items()}, str(tmp / "trainable.safetensors"))
        fault_pause("backup-trainable")
        torch.save({**state, "counters": counters.as_dict(), "rng": rng_state()}, tmp / "state.pt")
        fault_pause("backup-state")
        (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str))
        fault_pause("backup-config")
        for f in tmp.iterdir():
            fsync_file(f)
        fsync_dir(tmp)
    except Exception as err:  # torch and safetensors report a full disk as RuntimeError / their own error
        written, free_then = tree_size(tmp), free_bytes(backup_root)
        shutil.rmtree(tmp, ignore_errors=True)  # no half-written backup takes up the space
        full = as_disk_full(err, backup_root, max(needed, written), "a backup in", free_then, hint=INTACT)
        if full is not None:
            raise full from err
        if isinstance(err, OSError):
            raise OSError(
                err.errno,
                f"could not write the backup in {backup_root}: {err.strerror or err}. Check that folder (permissions, "
                "disk) or choose another workspace folder; the earlier backups are intact",
            ) from err
        raise
    fault_pause("backup-written")
    os.replace(tmp, final)
    fsync_dir(backup_root)
    fault_pause("backup-renamed")
    # The marker goes last, itself atomically: a folder that has it is complete.
    try:
        atomic_write_text(final / MARKER, json.dumps(counters.as_dict()), what="the backup's marker")
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)  # an unmarked folder is not a backup; free its space
        raise
    fault_pause("backup-marked")
    if keep:
        for old in complete_backups(backup_root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def complete_backups(backup_root: Path) -> list[Path]:
    """Complete backups, oldest first."""
    if not backup_root.is_dir():
        return []
    found = [p for p in backup_root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / MARKER).exists()]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def latest_backup(run_dirs: list[Path]) -> Path | None:
    candidates = [b for r in run_dirs for b in complete_backups(Path(r) / "backup")]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (p / MARKER).stat().st_mtime)


def _load_state(file: Path) -> dict[str, Any]:
    """The optimizer, scheduler and RNG states, unpickled weights-only; numpy's random state is the
    one kind of array allowed beside tensors."""
    import pickle  # noqa: PLC0415

    core = getattr(np, "_core", None) or np.core  # numpy 2 / numpy 1
    allowed = [np.ndarray, np.dtype, type(np.dtype(np.uint32)), core.multiarray._reconstruct]  # MT19937 keys
    with torch.serialization.safe_globals(allowed):
        try:
            return torch.load(file, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:
            raise ValueError(f"backup {file.parent}: state.pt holds objects other than tensors, numbers and strings, which "
                             "this trainer never writes, and loading them could run code; it was not loaded. Move that "
                             "backup folder out of the workspace to start the run without it.") from err


@dataclass
class LoadedBackup:
    path: Path
    trainable: dict[str, torch.Tensor]
    state: dict[str, Any]
    config: dict[str, Any]
    counters: Counters


def read_backup(path: Path) -> LoadedBackup:
    path = Path(path)
    if not (path / MARKER).exists():
        raise ValueError(f"backup {path} is incomplete (no {MARKER} marker); it cannot be resumed")
    state = _load_state(path / "state.pt")
    return LoadedBackup(
        path=path,
        trainable=load_file(str(path / "trainable.safetensors")),
        state=state,
        config=json.loads((path / "config.json").read_text()),
        counters=Counters(**state["counters"]),
    )
