"""The run directory: the only thing the page and the training process share.

<workspace>/runs/<run-id>/ holds config.json, events.jsonl (append-only, one JSON object a line),
log.txt (the worker's stdout/stderr), control/ (requests from the page), samples/, backup/,
save/ and tensorboard/. This module is pure Python (no torch): both sides import it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ot_gradio.fsutil import atomic_write_json

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
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    out.append({"type": "log", "message": f"unreadable event line: {line[:200]!r}"})
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


class EventWriter:
    """Appends one JSON object per line to events.jsonl, flushed per event."""

    def __init__(self, run: RunDir):
        self.run = run
        self._fh = open(run.events, "a", encoding="utf-8")

    def emit(self, type: str, **payload: Any) -> dict[str, Any]:
        event = {"type": type, "time": round(time.time(), 3), **payload}
        self._fh.write(json.dumps(event, default=str) + "\n")
        self._fh.flush()
        return event

    def status(self, status: str, message: str = "", **extra: Any) -> dict[str, Any]:
        return self.emit("status", status=status, message=message, **extra)

    def close(self) -> None:
        self._fh.close()


def new_run_id(prefix: str = "run") -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{prefix}-{uuid.uuid4().hex[:6]}"


def runs_root(workspace: str | Path) -> Path:
    return Path(workspace) / "runs"


def create_run(workspace: str | Path, config: dict[str, Any], prefix: str = "run") -> RunDir:
    run = RunDir(runs_root(workspace) / new_run_id(prefix)).make()
    write_json_atomic(run.config, config)
    return run


def list_runs(workspace: str | Path) -> list[RunDir]:
    root = runs_root(workspace)
    if not root.is_dir():
        return []
    return [RunDir(p) for p in sorted(root.iterdir()) if p.is_dir() and (p / "config.json").exists()]


def write_json_atomic(path: Path, data: Any) -> None:
    atomic_write_json(path, data, indent=2, default=str)
