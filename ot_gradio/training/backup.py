"""Backups: everything needed to continue a run, written so a crash never leaves a backup that
looks complete.

A backup is a folder `backup/<time>-step<N>/` with `trainable.safetensors` (the trained weights),
`state.pt` (optimizer, scheduler, grad scaler, RNG states, counters), `config.json`, and a
`COMPLETE` marker written last, which holds the counters, the id of the training (a fresh run
starts a training, a run continued from a backup carries its id on: backup_training.py) and the
version of the data plan that drew its epochs (data/plan_version.py; resume_plan.py reads it). `state.pt`
is read with torch's weights-only unpickler (tensors, numbers, strings and numpy's random state), so
a backup put in a workspace by someone else cannot run code when the run resumes from it. It is
assembled under a temporary name and renamed into place; a folder without the marker is never
picked for resume, and the next run started in the workspace removes it (runner/rundir.py
`remove_leftovers`).

A backup that has its marker but cannot be read is no complete backup: `complete_backups` leaves it
out, `read_backup` raises `UnreadableBackup` naming the folder (backup_damage.py). Rolling backups
are backup_prune.py.

A full disk raises fsutil.DiskFullError naming the folder, the space free and about the space a
backup needs; the half-written folder is removed first and earlier backups stay as they were.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ot_gradio.fsutil import BACKUP_MARKER as MARKER
from ot_gradio.fsutil import DiskFullError, as_disk_full, atomic_write_text, free_bytes, fsync_dir, fsync_file, tree_size

from ..data.plan_version import PLAN_VERSION, plan_of
from .backup_damage import UnreadableBackup, backup_problem, unreadable

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
    training: str = "",
    epoch_batches: int | None = None,
) -> Path:
    """Write a backup in `backup_root`; `training` (the training's id) goes into the marker, so
    rolling backups delete this training's older backups only. `keep`: delete all but the newest
    `keep` complete backups in `backup_root` after (tests; the trainer prunes with backup_prune.py).
    `epoch_batches`: the batches of the epoch it stopped in, by the plan that drew them (a resume
    under another seed or plan tells a finished epoch from one stopped inside by it)."""
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
        marker = {**counters.as_dict(), "written": time.time(), **({"training": training} if training else {}),
                  "plan": PLAN_VERSION, **({"epoch_batches": int(epoch_batches)} if epoch_batches is not None else {})}
        atomic_write_text(final / MARKER, json.dumps(marker), what="the backup's marker")
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)  # an unmarked folder is not a backup; free its space
        raise
    fault_pause("backup-marked")
    if keep:
        for old in complete_backups(backup_root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def marked_backups(backup_root: Path) -> list[Path]:
    """Folders with the COMPLETE marker, readable or not, oldest first."""
    if not backup_root.is_dir():
        return []
    found = [p for p in backup_root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / MARKER).exists()]
    return sorted(found, key=backup_order)


def complete_backups(backup_root: Path) -> list[Path]:
    """Complete backups, oldest first: marked, and not found damaged (`backup_problem`)."""
    return [p for p in marked_backups(backup_root) if backup_problem(p) is None]


def latest_backup(run_dirs: list[Path]) -> Path | None:
    return newest_backup(b for r in run_dirs for b in complete_backups(Path(r) / "backup"))


def damaged_backups(run_dirs: list[Path]) -> list[tuple[Path, str]]:
    """Marked backups that cannot be read, newest first, with what is wrong."""
    found = [(b, backup_problem(b)) for r in run_dirs for b in marked_backups(Path(r) / "backup")]
    return sorted(((b, why) for b, why in found if why is not None), key=lambda f: backup_order(f[0]), reverse=True)


def _marker(backup: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((Path(backup) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def marker_time(backup: Path, marker: dict[str, Any] | None = None) -> float:
    """When the backup was written: the time its marker holds, which a copy keeps (`cp -r`, an
    upload to Drive, rsync without -t give the files the time of the copy, in any order); the
    marker file's own time for a backup written before markers held it. `marker`: already read."""
    written = (marker if marker is not None else _marker(backup) or {}).get("written")
    if isinstance(written, (int, float)) and not isinstance(written, bool) and math.isfinite(written):
        return float(written)
    try:
        return (backup / MARKER).stat().st_mtime
    except OSError:
        return 0.0


def marker_step(backup: Path, marker: dict[str, Any] | None = None) -> int:
    """The backup's optimizer step, from its marker (-1 when it cannot be read). `marker`: already read."""
    step = (marker if marker is not None else _marker(backup) or {}).get("global_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else -1


def marker_plan(backup: Path) -> int:
    """The version of the data plan the backup's epochs were drawn with (data/plan_version.py): 0
    for a backup written before markers held it, or whose marker cannot be read."""
    return plan_of(_marker(backup))


def epoch_length(backup: Path, counters: Counters, steps_in_epoch: Callable[[int], int] | None) -> Callable[[int], int] | None:
    """The batches of an epoch as the backup saw them: its own epoch's count from its marker (the
    plan and seed that drew it), other epochs' (and a marker without it) from `steps_in_epoch`, this
    run's plan."""
    written = (_marker(backup) or {}).get("epoch_batches")
    if not isinstance(written, int) or isinstance(written, bool):
        return steps_in_epoch
    return lambda epoch: written if epoch == counters.epoch else (steps_in_epoch(epoch) if steps_in_epoch else written)


def backup_order(backup: Path) -> tuple[float, int, str]:
    """Sort key, oldest first: the time written, then the step (two backups of the same second
    written before markers held the time), then the name."""
    marker = _marker(backup) or {}
    return (marker_time(backup, marker), marker_step(backup, marker), Path(backup).name)


def step_order(backup: Path) -> tuple[int, float, str]:
    """Sort key of the backups of one training, oldest first: its steps only go up, whatever the
    clocks of the machines it ran on, or file times a copy gave a backup written before markers
    held the time."""
    marker = _marker(backup) or {}
    return (marker_step(backup, marker), marker_time(backup, marker), Path(backup).name)


def newest_backup(backups: Iterable[Path]) -> Path | None:
    """The newest of `backups`: the last written, and of its training (the id in its marker) the
    furthest step."""
    backups = list(backups)
    if not backups:
        return None
    last = max(backups, key=backup_order)
    training = marker_training(last)
    if not training:
        return last
    return max((b for b in backups if marker_training(b) == training), key=step_order)


def marker_training(backup: Path) -> str | None:
    """The id of the training a backup is of, from its marker: '' for a backup written before
    markers held one (the counters only), None when the marker cannot be read."""
    marker = _marker(backup)
    if marker is None:
        return None
    training = marker.get("training", "")
    return training if isinstance(training, str) else None


def saved_output(backup: Path) -> str:
    """The output file of the run that wrote the backup ('' when its config cannot be read)."""
    try:
        config = json.loads((backup / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(config.get("output_model_destination") or "") if isinstance(config, dict) else ""


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
            if "Unsupported global" not in str(err):  # not a call of anything: damaged data
                detail = str(err).split("WeightsUnpickler error:")[-1].strip().split("\n")[0][:200]
                raise unreadable(file.parent, f"state.pt is damaged ({detail})") from err
            raise unreadable(file.parent, "state.pt holds objects other than tensors, numbers and strings, which this "
                                           "trainer never writes, and loading them could run code; it was not loaded") from err
        except Exception as err:  # noqa: BLE001  torch reports a damaged file as RuntimeError, EOFError, ...
            raise unreadable(file.parent, f"state.pt cannot be loaded ({_short(err)})") from err


def _short(err: BaseException) -> str:
    """An error's type and first sentence (torch's damaged-zip message runs on for five)."""
    text = str(err).strip().split(". ")[0].split("\n")[0][:200]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


@dataclass
class LoadedBackup:
    path: Path
    trainable: dict[str, torch.Tensor]
    state: dict[str, Any]
    config: dict[str, Any]
    counters: Counters


def read_backup(path: Path) -> LoadedBackup:
    """The whole backup, or UnreadableBackup naming its folder and what is wrong (and from then
    on it is no complete backup: the resume takes the next older one)."""
    path = Path(path)
    if not (path / MARKER).exists():
        raise ValueError(f"backup {path} is incomplete (no {MARKER} marker); it cannot be resumed")
    problem = backup_problem(path)
    if problem is not None:
        raise UnreadableBackup(path, problem)
    state = _load_state(path / "state.pt")
    if not isinstance(state, dict) or not isinstance(state.get("counters"), dict):
        raise unreadable(path, "state.pt holds no step counters")
    try:
        counters = Counters(**state["counters"])
    except TypeError as err:
        raise unreadable(path, f"state.pt holds damaged step counters ({err})") from err
    try:
        trainable = load_file(str(path / "trainable.safetensors"))
    except Exception as err:  # noqa: BLE001  safetensors' own error, or an OSError of a bad disk
        raise unreadable(path, f"trainable.safetensors cannot be loaded ({_short(err)})") from err
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise unreadable(path, f"config.json cannot be read ({err})") from err
    return LoadedBackup(path=path, trainable=trainable, state=state, config=config, counters=counters)
