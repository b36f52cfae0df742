"""UI side of the run boundary: start, stop, reattach to and poll training runs.

Pure Python (no torch). The worker is `python -m ot_gradio.runner.worker <run dir>` in its own
process group, so a crash in training cannot take the page down, and Stop can escalate to
SIGTERM and SIGKILL of the whole group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..secrets import share_secrets
from .launch import start_child, worker_command
from .rundir import FINAL_STATUSES, RunDir, create_run, list_runs

STOP_GRACE_SECONDS = 120.0  # after Stop, or the worker's latest event since, with no news: escalate
# what a stopping worker may take long over and must not be killed in: its stop's backup and
# model (and samples due at that step), which a kill would leave half written
STOPPING_WORK = frozenset({"backup", "saving", "sampling"})


def as_number(value: Any) -> float | None:
    """An event's number; None for a missing one or one that is no number."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass
class RunState:
    """The absolute state of a run, rebuilt from its events: a skipped poll loses nothing."""

    run_id: str
    status: str = "starting"
    message: str = ""
    download: str = ""  # while a model loads: what it has downloaded ("3.2 GB downloaded, 45.0 MB/s"), for the run bar
    progress: dict[str, Any] = field(default_factory=dict)
    losses: list[tuple[int, float]] = field(default_factory=list)
    lrs: list[tuple[int, float]] = field(default_factory=list)
    validation: list[tuple[int, float]] = field(default_factory=list)  # (global step, validation loss)
    samples: list[dict[str, Any]] = field(default_factory=list)
    saved: list[str] = field(default_factory=list)
    embedding_files: list[str] = field(default_factory=list)  # of the last save
    backups: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    alive: bool = False
    exit_code: int | None = None
    log_tail: str = ""

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "status":
            self.status = event.get("status", self.status)
            self.message = event.get("message", "")
            self.download = str(event.get("download") or "")
        elif kind == "progress":
            self.progress = {k: v for k, v in event.items() if k not in ("type", "time")}
        elif kind == "metrics":
            step = int(event.get("global_step", 0))
            # a value that is no number (an older run wrote Adafactor's rate as "tensor(0.0030)") is
            # left out of the charts, never an error that stops the page
            if (loss := as_number(event.get("loss"))) is not None:
                self.losses.append((step, loss))
            if (lr := as_number(event.get("lr"))) is not None:
                self.lrs.append((step, lr))
        elif kind == "validation" and isinstance(event.get("loss"), (int, float)):
            self.validation.append((int(event.get("global_step", 0)), float(event["loss"])))
        elif kind == "sample":
            self.samples.append({k: v for k, v in event.items() if k != "type"})
        elif kind == "saved" and event.get("kind") == "embedding":
            self.embedding_files.append(str(event.get("path")))
        elif kind == "saved":
            self.saved.append(str(event.get("path")))
            self.embedding_files = []
        elif kind == "backup":
            self.backups.append(str(event.get("path")))
        elif kind == "warning":
            self.warnings.append(str(event.get("message")))

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES or self.status == "crashed"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1].split(" ")[0] != "Z"
    except OSError:
        return True


def _last_line(text: str) -> str:
    """The log's last line: for a process that died before it could write an event (an import
    error, a kill), the closest thing to a reason."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


@dataclass
class StopAsked:
    """A Stop the worker is carrying out: the grace period runs from the Stop, then from each
    event the worker writes, and is on hold while it writes its backup or model."""

    run: RunDir
    since: float
    cursor: int = 0  # events.jsonl read up to here
    status: str = ""  # the worker's latest status

    def read_news(self, now: float) -> None:
        events, self.cursor = self.run.read_events(self.cursor)
        for event in events:
            if event.get("type") == "status":
                self.status = str(event.get("status") or "")
            when = as_number(event.get("time"))
            self.since = max(self.since, min(now, when) if when is not None else now)

    def overdue(self, now: float) -> bool:
        return self.status not in STOPPING_WORK and now - self.since > STOP_GRACE_SECONDS


def _key(run: RunDir) -> str:
    """Runs are known by their absolute folder, however the workspace was written."""
    return str(Path(run.path).resolve())


class Supervisor:
    def __init__(self, workspace: str | Path):
        self.workspace = Path(workspace).resolve()
        self.workspaces: list[Path] = [self.workspace]  # every workspace a run was started in
        self._procs: dict[str, subprocess.Popen] = {}  # keyed by run folder
        self._stop_requested: dict[str, StopAsked] = {}

    # --- lifecycle --------------------------------------------------------------------------
    def start(self, config: dict[str, Any], env: dict[str, str] | None = None, workspace: str | Path | None = None,
              notes: Iterable[str] = ()) -> RunDir:
        """`notes`: warnings the page gives the run (e.g. its renamed output file), first in its events."""
        workspace = (Path(workspace) if workspace else self.workspace).resolve()
        if workspace.resolve() not in [w.resolve() for w in self.workspaces]:
            self.workspaces.append(workspace)
        share_secrets(self.workspace, workspace)  # the worker reads the run workspace's file: the page's token there too
        run = create_run(workspace, config)
        if notes:
            with open(run.events, "a", encoding="utf-8") as fh:  # before the worker writes: the first lines
                fh.writelines(json.dumps({"type": "warning", "time": round(time.time(), 3), "message": n}) + "\n" for n in notes)
            with open(run.log, "a", encoding="utf-8") as fh:
                fh.writelines(f"warning: {n}\n" for n in notes)
        proc = start_child(worker_command(_key(run)), log=run.log, env=env)
        run.pid_file.write_text(str(proc.pid))
        self._procs[_key(run)] = proc
        return run

    def stop(self, run: RunDir) -> str:
        """First call asks the worker to finish its step, back up, save and exit. A second call,
        or `check_stop_timeouts` when the worker gives no news for the grace period, escalates to
        SIGTERM, then SIGKILL."""
        pid = self._pid(run)
        if pid is None or not self._alive(run):
            return "not running"
        first = self._stop_requested.get(_key(run))
        if first is None:
            run.request("stop")
            self._stop_requested[_key(run)] = StopAsked(run, time.time())
            return "stop requested"
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return "not running"
        deadline = time.time() + 10
        while time.time() < deadline and self._alive(run):
            time.sleep(0.2)
        if self._alive(run):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return "killed"
        return "terminated"

    def check_stop_timeouts(self) -> None:
        """Escalate a Stop the worker has given no sign of carrying out for STOP_GRACE_SECONDS. A
        worker writing its backup or model is never killed by the clock (a slow disk or a big model
        can take longer; a kill there lost the backup the Stop was writing); a second Stop is."""
        now = time.time()
        for asked in list(self._stop_requested.values()):
            if not self._alive(asked.run):
                continue
            asked.read_news(now)
            if asked.overdue(now):
                self.stop(asked.run)

    def request(self, run: RunDir, what: str) -> None:
        run.request(what)

    def wait(self, run: RunDir, timeout: float | None = None) -> int | None:
        proc = self._procs.get(_key(run))
        if proc is not None:
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        end = None if timeout is None else time.time() + timeout
        while self._alive(run):
            if end is not None and time.time() > end:
                return None
            time.sleep(0.2)
        return self._exit_code(run)

    # --- reading ----------------------------------------------------------------------------
    def runs(self) -> list[RunDir]:
        """Runs of every known workspace, oldest first."""
        found = [r for w in self.workspaces for r in list_runs(w)]
        return sorted(found, key=lambda r: r.run_id)

    def watch(self, workspace: str | Path) -> None:
        workspace = Path(workspace).resolve()
        if workspace.resolve() not in [w.resolve() for w in self.workspaces]:
            self.workspaces.append(workspace)

    def active_runs(self) -> list[RunDir]:
        return [r for r in self.runs() if self._alive(r)]

    def state(self, run: RunDir) -> RunState:
        state = RunState(run.run_id)
        events, _ = run.read_events(0)
        for event in events:
            state.apply(event)
        state.alive = self._alive(run)
        state.exit_code = self._exit_code(run)
        if not state.alive and not state.finished:
            # The process is gone without saying how it ended: it crashed or was killed.
            state.status = "crashed"
            code = state.exit_code
            last = _last_line(run.log_tail(20))
            state.message = (f"the training process ended without a final status (exit code "
                             f"{code if code is not None else 'unknown'})" + (f": {last}" if last else "")
                             + "; see the log below")
        if state.status in ("crashed", "error"):
            state.log_tail = run.log_tail()
        return state

    def poll(self, run: RunDir, cursor: int = 0) -> tuple[list[dict[str, Any]], int, RunState]:
        events, new_cursor = run.read_events(cursor)
        return events, new_cursor, self.state(run)

    # --- process bookkeeping ----------------------------------------------------------------
    def _pid(self, run: RunDir) -> int | None:
        proc = self._procs.get(_key(run))
        if proc is not None:
            return proc.pid
        try:
            return int(run.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def _alive(self, run: RunDir) -> bool:
        proc = self._procs.get(_key(run))
        if proc is not None:
            return proc.poll() is None
        pid = self._pid(run)
        if pid is None or not _pid_alive(pid):
            return False
        try:  # the pid may have been reused by another program since
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return True
        return _key(run) in cmdline

    def _exit_code(self, run: RunDir) -> int | None:
        proc = self._procs.get(_key(run))
        if proc is not None and proc.poll() is not None:
            return proc.returncode
        try:
            return int(run.exit_file.read_text().strip())
        except (OSError, ValueError):
            return None
