"""The run directory: the only thing the page and the training process share.

<workspace>/runs/<run-id>/ holds config.json, events.jsonl (append-only, one JSON object a line),
log.txt (the worker's stdout/stderr), control/ (requests from the page), samples/, backup/,
save/ and tensorboard/. This module is pure Python (no torch): both sides import it.

A live worker holds a shared lock on its events.jsonl (POSIX flock; the kernel drops it when the
process dies, SIGKILL included). Starting a run in a workspace removes what crashed runs there left
behind, only in runs nobody holds that lock on: backup folders without their COMPLETE marker
(never a complete backup) and the hidden temp files and folders of interrupted atomic writes.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ot_gradio.fsutil import BACKUP_MARKER, as_disk_full, atomic_write_json

try:
    import fcntl
except ImportError:  # Windows: no flock; only runs that wrote their exit code count as finished
    fcntl = None

log = logging.getLogger(__name__)

CONTROL_REQUESTS = ("stop", "sample", "backup", "save")
FINAL_STATUSES = ("done", "stopped", "error")


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def log(self) -> Path:
        return self.path / "log.txt"

    @property
    def control(self) -> Path:
        return self.path / "control"

    @property
    def samples(self) -> Path:
        return self.path / "samples"

    @property
    def backup(self) -> Path:
        return self.path / "backup"

    @property
    def save(self) -> Path:
        return self.path / "save"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"

    @property
    def pid_file(self) -> Path:
        return self.path / "worker.pid"

    @property
    def exit_file(self) -> Path:
        return self.path / "exit_code"

    @property
    def run_id(self) -> str:
        return self.path.name

    def make(self) -> RunDir:
        for sub in (self.path, self.control, self.samples, self.backup, self.save, self.tensorboard):
            sub.mkdir(parents=True, exist_ok=True)
        return self

    # --- control: page -> worker ------------------------------------------------------------
    def request(self, what: str) -> None:
        if what not in CONTROL_REQUESTS:
            raise ValueError(f"unknown request '{what}': use one of {', '.join(CONTROL_REQUESTS)}")
        self.control.mkdir(parents=True, exist_ok=True)
        (self.control / what).write_text(str(time.time()))

    def take_requests(self) -> set[str]:
        """Requests waiting for the worker. 'stop' stays (it is a state); others are consumed."""
        found: set[str] = set()
        for what in CONTROL_REQUESTS:
            f = self.control / what
            if f.exists():
                found.add(what)
                if what != "stop":
                    f.unlink(missing_ok=True)
        return found

    # --- events: worker -> page -------------------------------------------------------------
    def read_events(self, cursor: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Events after byte offset `cursor`, and the new cursor. A half-written last line is
        left for the next read, so a poll never loses or garbles an event."""
        if not self.events.exists():
            return [], cursor
        with open(self.events, "rb") as fh:
            fh.seek(cursor)
            data = fh.read()
        out: list[dict[str, Any]] = []
        consumed = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            consumed += len(line)
            line = line.strip()
            if line:
                out += _parse_event_line(line)
        return out, cursor + consumed

    def iter_events(self) -> Iterator[dict[str, Any]]:
        events, _ = self.read_events(0)
        return iter(events)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        with open(self.log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


RESERVE_BYTES = 64 * 1024  # kept on disk while a run writes, freed when the disk fills up


def _write_fd(fd: int, data: bytes) -> int:
    """One write(2); tests replace it to simulate a full disk."""
    return os.write(fd, data)


def _parse_event_line(line: bytes) -> list[dict[str, Any]]:
    """The events of one line. A line cut off by a crash or a full disk and then continued by the
    next event's write reads as a note and that next event, which is not lost."""
    try:
        event = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        event = None
    if isinstance(event, dict):
        return [event]
    note = {"type": "log", "message": f"unreadable event line: {line[:200]!r}"}
    cut = line.rfind(b'{"type"')
    if cut > 0:
        return [note, *_parse_event_line(line[cut:])]
    return [note]


class EventWriter:
    """Appends one JSON object per line to events.jsonl, each written straight to the file.

    A write that fails leaves no cut-off line (the file is cut back to where the event began) and
    raises DiskFullError when the disk is full. The writer holds a small reserve file in the run
    folder and frees it then, so the run's final "error: disk full" status still finds room."""

    def __init__(self, run: RunDir):
        self.run = run
        self._fh = open(run.events, "ab", buffering=0)  # noqa: SIM115
        if fcntl is not None:  # "this run is live" for remove_leftovers (shared: every rank holds it)
            try:  # waits at most for a cleaner's test of this lock (an instant)
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_SH)
            except OSError:
                pass  # a filesystem without locks: the run still works
        self._reserve: Path | None = Path(run.path) / f".events-reserve-{os.getpid()}.tmp"
        try:
            with open(self._reserve, "wb") as fh:
                fh.write(bytes(RESERVE_BYTES))
        except OSError:
            self.release_reserve()

    def emit(self, type: str, **payload: Any) -> dict[str, Any]:
        event = {"type": type, "time": round(time.time(), 3), **payload}
        self._append((json.dumps(event, default=str) + "\n").encode("utf-8"))
        return event

    def _append(self, data: bytes) -> None:
        fd = self._fh.fileno()
        start = os.fstat(fd).st_size
        view = memoryview(data)
        try:
            while view:
                view = view[_write_fd(fd, view):]
        except OSError as err:
            try:
                if os.fstat(fd).st_size > start:
                    os.ftruncate(fd, start)  # no cut-off line for the readers
            except OSError:
                pass
            self.release_reserve()
            full = as_disk_full(err, self.run.events, len(data), "the run's events to")
            if full is not None:
                raise full from err
            raise

    def release_reserve(self) -> None:
        if self._reserve is not None:
            self._reserve.unlink(missing_ok=True)
            self._reserve = None

    def status(self, status: str, message: str = "", **extra: Any) -> dict[str, Any]:
        return self.emit("status", status=status, message=message, **extra)

    def close(self) -> None:
        self.release_reserve()
        self._fh.close()


def new_run_id(prefix: str = "run") -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{prefix}-{uuid.uuid4().hex[:6]}"


def runs_root(workspace: str | Path) -> Path:
    return Path(workspace) / "runs"


def create_run(workspace: str | Path, config: dict[str, Any], prefix: str = "run") -> RunDir:
    """A new run folder; first removes what crashed runs of this workspace left behind (written
    to the new run's log.txt)."""
    removed = clean_workspace(workspace)
    run = RunDir(runs_root(workspace) / new_run_id(prefix)).make()
    write_json_atomic(run.config, config)
    if removed:
        with open(run.log, "a", encoding="utf-8") as fh:
            for path in removed:
                fh.write(f"removed a leftover of an interrupted write: {path}\n")
    return run


def run_is_live(run: RunDir) -> bool:
    """Does a worker still hold this run's events.jsonl? Without flock (Windows): live unless
    the run wrote its exit code."""
    if fcntl is None:
        return not run.exit_file.exists()
    try:
        fh = open(run.events, "rb")
    except OSError:
        return False  # no events yet: no worker ever wrote here
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False
    finally:
        fh.close()


def _is_temp(name: str) -> bool:
    """Hidden temp files and folders of fsutil's atomic writes (`.<name>.<random>.tmp`) and of
    backups being assembled (`.tmp-<name>`)."""
    return name.startswith(".tmp-") or (name.startswith(".") and name.endswith(".tmp"))


def remove_leftovers(run: RunDir) -> list[Path]:
    """Remove what an interrupted write left in a run that no worker holds: temp files and
    folders, and backup folders without their marker. Complete backups are never touched."""
    if run_is_live(run):
        return []
    found: list[Path] = []
    if run.backup.is_dir():
        for p in run.backup.iterdir():
            if _is_temp(p.name) or (p.is_dir() and not p.name.startswith(".") and not (p / BACKUP_MARKER).exists()):
                found.append(p)
    for folder in (run.save, run.samples, run.path):
        if folder.is_dir():
            found += [p for p in folder.iterdir() if _is_temp(p.name)]
    removed = []
    for p in found:
        if p.is_dir() and (p / BACKUP_MARKER).exists():
            continue  # never a complete backup
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        if not p.exists():
            removed.append(p)
            log.info("removed a leftover of an interrupted write: %s", p)
    return removed


def clean_workspace(workspace: str | Path) -> list[Path]:
    """`remove_leftovers` for every run of the workspace (live runs are skipped)."""
    removed: list[Path] = []
    root = runs_root(workspace)
    if not root.is_dir():
        return removed
    for p in sorted(root.iterdir()):
        if p.is_dir() and not p.is_symlink():
            try:
                removed += remove_leftovers(RunDir(p))
            except OSError as err:  # a folder we cannot clean must not stop a new run
                log.warning("could not clean %s: %s", p, err)
    return removed


def list_runs(workspace: str | Path) -> list[RunDir]:
    root = runs_root(workspace)
    if not root.is_dir():
        return []
    return [RunDir(p) for p in sorted(root.iterdir()) if p.is_dir() and (p / "config.json").exists()]


def write_json_atomic(path: Path, data: Any) -> None:
    atomic_write_json(path, data, indent=2, default=str)
