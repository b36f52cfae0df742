"""Backups: everything needed to continue a run, written so a crash never leaves a backup that
looks complete.

A backup is a folder `backup/<time>-step<N>/` with `trainable.safetensors` (the trained weights),
`state.pt` (optimizer, scheduler, grad scaler, RNG states, counters), `config.json`, and a
`COMPLETE` marker written last. It is assembled under a temporary name and renamed into place;
a folder without the marker is never picked for resume.
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

from ot_gradio.fsutil import atomic_write_text, fsync_dir, fsync_file

MARKER = "COMPLETE"


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
    worker sleeps at that point of a backup write, so a test can kill it there. Unset in normal use."""
    spec = os.environ.get("OT_GRADIO_FAULT_PAUSE", "")
    name, _, seconds = spec.partition(":")
    if name == point:
        time.sleep(float(seconds or 1))


def write_backup(
    backup_root: Path,
    trainable: dict[str, torch.Tensor],
    state: dict[str, Any],
    config: dict[str, Any],
    counters: Counters,
    keep: int | None = None,
) -> Path:
    backup_root.mkdir(parents=True, exist_ok=True)
    name = time.strftime("%Y%m%d-%H%M%S") + f"-step{counters.global_step}"
    final = backup_root / name
    if final.exists():
        name += f"-{os.getpid()}-{int(time.time() * 1000) % 1000}"
        final = backup_root / name
    tmp = backup_root / f".tmp-{name}"
    try:
        tmp.mkdir()
        save_file({k: v.detach().contiguous().cpu() for k, v in trainable.items()}, str(tmp / "trainable.safetensors"))
        torch.save({**state, "counters": counters.as_dict(), "rng": rng_state()}, tmp / "state.pt")
        (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str))
        for f in tmp.iterdir():
            fsync_file(f)
        fsync_dir(tmp)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)  # no half-written backup takes up the space
        raise OSError(
            err.errno,
            f"could not write the backup in {backup_root}: {err.strerror or err}. Free some disk space or choose "
            "another workspace folder; the earlier backups are intact",
        ) from err
    fault_pause("backup-written")
    os.replace(tmp, final)
    fsync_dir(backup_root)
    fault_pause("backup-renamed")
    # The marker goes last, itself atomically: a folder that has it is complete.
    atomic_write_text(final / MARKER, json.dumps(counters.as_dict()))
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
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
    return LoadedBackup(
        path=path,
        trainable=load_file(str(path / "trainable.safetensors")),
        state=state,
        config=json.loads((path / "config.json").read_text()),
        counters=Counters(**state["counters"]),
    )
