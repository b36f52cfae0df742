"""UI side of tool jobs: start a heavy tool in a worker process, poll it, cancel it.

A job is a directory `<workspace>/jobs/<job-id>/` with params.json (name + parameters),
events.jsonl (status, progress, log, result), log.txt (the process's output), control/cancel
and exit_code. Pure Python (no torch). Cancel asks first (the tool stops between items and
keeps what it finished); a second Cancel kills the process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .launch import module_command, start_child
from .rundir import RunDir, new_run_id, write_json_atomic

JOB_FINAL = ("done", "cancelled", "error")


class JobDir(RunDir):
    @property
    def params(self) -> Path:
        return self.path / "params.json"

    def make(self) -> JobDir:
        for sub in (self.path, self.control):
            sub.mkdir(parents=True, exist_ok=True)
        return self

    def cancel_requested(self) -> bool:
        return (self.control / "cancel").exists()

    def request_cancel(self) -> None:
        self.control.mkdir(parents=True, exist_ok=True)
        (self.control / "cancel").write_text(str(time.time()))


@dataclass
class JobState:
    job_id: str
    name: str = ""
    status: str = "starting"
    message: str = ""
    done: int = 0
    total: int = 0
    progress_message: str = ""
    per: int = 1  # units of done/total that make one thing counted (tools/jobs.Job.progress)
    log: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    alive: bool = False

    @property
    def finished(self) -> bool:
        return self.status in JOB_FINAL or self.status == "crashed"

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "status":
            self.status, self.message = event.get("status", self.status), event.get("message", "")
            self.name = event.get("name", self.name)
        elif kind == "progress":
            self.done, self.total = int(event.get("done", 0)), int(event.get("total", 0))
            self.progress_message = event.get("message", "")
            self.per = max(1, int(event.get("per", 1) or 1))
        elif kind == "log":
            self.log.append(str(event.get("message", "")))
        elif kind == "result":
            self.result = event.get("result")


class JobSupervisor:
    def __init__(self, workspace: str | Path):
        self.root = Path(workspace).resolve() / "jobs"
        self._procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, params: dict[str, Any], env: dict[str, str] | None = None) -> JobDir:
        job = JobDir(self.root / new_run_id(name)).make()
        write_json_atomic(job.params, {"name": name, "params": params})
        proc = start_child(module_command("ot_gradio.runner.job_worker", str(job.path)), log=job.log, env=env)
        job.pid_file.write_text(str(proc.pid))
        self._procs[str(job.path)] = proc
        return job

    def get(self, job_id: str) -> JobDir:
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise ValueError(f"unknown job '{job_id}'")
        return JobDir(self.root / job_id)

    def alive(self, job: JobDir) -> bool:
        proc = self._procs.get(str(job.path))
        return proc is not None and proc.poll() is None

    def cancel(self, job: JobDir) -> str:
        if not self.alive(job):
            return "not running"
        if not job.cancel_requested():
            job.request_cancel()
            return "cancel requested"
        try:
            os.killpg(self._procs[str(job.path)].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return "killed"

    def wait(self, job: JobDir, timeout: float | None = None) -> int | None:
        proc = self._procs.get(str(job.path))
        if proc is None:
            return None
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def state(self, job: JobDir) -> JobState:
        state = JobState(job.run_id)
        for event in job.iter_events():
            state.apply(event)
        state.alive = self.alive(job)
        if not state.alive and not state.finished and str(job.path) in self._procs:
            state.status = "crashed"
            code = self._procs[str(job.path)].returncode
            state.message = f"the tool's process ended without a result (exit code {code}): {job.log_tail(8)}"
        return state
