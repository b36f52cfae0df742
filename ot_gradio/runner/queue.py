"""A queue of configs that start one after another.

Stored in ``<workspace>/queue.json`` (written atomically). The runner thread starts the next
waiting entry only when the supervisor has no active run, so two runs never overlap; a failed
run is marked and the next entry starts. Torch-free.

States: waiting -> running -> done | stopped | failed. "stopped" is a run the user ended with
Stop (its run folder says "stopped", as the Runs tab shows it): not a failure, and like after a
failure the queue goes on with the next entry (to halt the queue, remove the waiting entries).
"failed" is a run that ended with an error or crashed (the note says which), or an entry that
could not start. Workers live in their own process group, so a run survives an app restart: an
entry found "running" at start-up is followed again, and marked by how its run ended.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

from .outputs import claim_output, destination

STATES = ("waiting", "running", "done", "stopped", "failed")
ENDED = {"done": "done", "stopped": "stopped"}  # a run's final status -> the entry's state; any other is "failed"


def output_of(config_file: Path) -> str:
    """A run's output file, from its config.json ("" if unreadable)."""
    try:
        return destination(json.loads(config_file.read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        return ""


class Busy(RuntimeError):
    """A run started elsewhere in the meantime: the entry waits for the next pass."""


class QueueBackend(Protocol):
    """What the queue needs from the supervisor (a fake one in tests)."""

    def busy(self) -> bool: ...

    def start(self, config: dict[str, Any]) -> str: ...  # returns the run folder

    def outcome(self, run_dir: str) -> str | None: ...  # None while running, else the run's final status


class SupervisorBackend:
    """Adapter over ot_gradio.runner.supervisor.Supervisor, using the same start call as the page."""

    def __init__(self, supervisor: Any, workspace: str | Path, lock: Any = None, prepare: Any = None):
        self.supervisor = supervisor
        self.workspace = workspace
        self.lock = lock or threading.Lock()  # the page's start lock: a click and the queue never both start
        self.prepare = prepare  # what Start does before starting (e.g. writing the demo's images)

    def busy(self) -> bool:
        return bool(self.supervisor.active_runs())

    def claimed_outputs(self) -> list[str]:
        """The output files of the active runs."""
        return [output_of(run.config) for run in self.supervisor.active_runs()]

    def start(self, config: dict[str, Any], notes: list[str] | tuple[str, ...] = ()) -> str:
        """Starts the entry's config. Its output file is checked again (a run started from the page
        may have written it since it was queued): if taken, the config is renamed in place, so the
        queue's entry shows the file the run writes."""
        with self.lock:
            if self.supervisor.active_runs():
                raise Busy("a run is already active")
            if self.prepare is not None:
                self.prepare(config)
            claimed, note = claim_output(config)
            config.update(claimed)
            notes = [*notes, note] if note else list(notes)
            run = self.supervisor.start(config, workspace=config.get("workspace_dir") or self.workspace, notes=notes)
        return str(run.path)

    def outcome(self, run_dir: str) -> str | None:
        """None while the run goes on, else its final status (done, stopped, error, crashed)."""
        from .rundir import RunDir  # noqa: PLC0415

        run = RunDir(Path(run_dir))
        self.supervisor.watch(run.path.parent.parent)  # after an app restart: the monitor shows this run too
        state = self.supervisor.state(run)
        if state.alive and not state.finished:
            return None
        return state.status


class RunQueue:
    def __init__(self, workspace: str | Path, backend: QueueBackend, poll_seconds: float = 2.0):
        self.path = Path(workspace) / "queue.json"
        self.backend = backend
        self.poll_seconds = poll_seconds
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.entries: list[dict[str, Any]] = self._load()
        changed = False
        for entry in self.entries:
            if entry.get("state") == "running" and not entry.get("run_dir"):  # the app stopped while starting it
                entry["state"] = "failed"
                entry["note"] = "the app stopped while this run was starting"
                changed = True
        if changed:
            self._save()
        # a "running" entry with a run folder is followed again by step(): its worker outlives the app

    # --- storage ---------------------------------------------------------------------------
    def _load(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [e for e in data.get("entries", []) if isinstance(e, dict) and e.get("state") in STATES]

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".queue.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"entries": self.entries}, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)

    # --- editing ---------------------------------------------------------------------------
    def add(self, config: dict[str, Any], name: str = "") -> str:
        """Queues `config`; an output file that a waiting or running run will write, or that an
        earlier run wrote, is numbered (runner/outputs.py; `output_note` says so)."""
        with self._lock:
            claimed = [destination(e["config"]) for e in self.entries if e["state"] in ("waiting", "running")]
            claimed += getattr(self.backend, "claimed_outputs", list)()
            config, note = claim_output(config, claimed)
            entry = {
                "id": uuid.uuid4().hex[:8],
                "name": name or str(config.get("name") or Path(str(config.get("output_model_destination") or "run")).name),
                "config": config,
                "state": "waiting",
                "added": time.strftime("%Y-%m-%d %H:%M:%S"),
                "run_dir": "",
            }
            if note:
                entry["output_note"] = note
            self.entries.append(entry)
            self._save()
        self._wake.set()
        return entry["id"]

    def _index(self, entry_id: str) -> int:
        for i, entry in enumerate(self.entries):
            if entry["id"] == entry_id:
                return i
        raise KeyError(f"no queue entry with id {entry_id!r}")

    def remove(self, entry_id: str) -> None:
        with self._lock:
            i = self._index(entry_id)
            if self.entries[i]["state"] == "running":
                raise ValueError("this entry is running: stop the run first")
            del self.entries[i]
            self._save()

    def move(self, entry_id: str, offset: int) -> None:
        with self._lock:
            i = self._index(entry_id)
            j = max(0, min(len(self.entries) - 1, i + offset))
            self.entries.insert(j, self.entries.pop(i))
            self._save()

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self.entries]

    def waiting(self) -> int:
        with self._lock:
            return sum(1 for e in self.entries if e["state"] == "waiting")

    # --- running ---------------------------------------------------------------------------
    def step(self) -> None:
        """One pass: finish the running entry if its run ended, then start the next if idle."""
        with self._lock:
            for entry in self.entries:
                if entry["state"] == "running":
                    try:
                        result = self.backend.outcome(entry["run_dir"])
                    except Exception as exc:  # noqa: BLE001 - e.g. its run folder was deleted
                        result = f"unknown ({exc})"
                    if result is None:
                        return
                    entry["state"] = ENDED.get(result, "failed")
                    if entry["state"] == "failed":
                        entry["note"] = f"the run ended: {result}"
                    self._save()
            if self.backend.busy():
                return  # a run started from the page: wait for it
            for entry in self.entries:
                if entry["state"] == "waiting":
                    try:
                        notes = [entry["output_note"]] if entry.get("output_note") else []
                        entry["run_dir"] = self.backend.start(entry["config"], notes) if notes else self.backend.start(entry["config"])
                        entry["state"] = "running"
                    except Busy:
                        return
                    except Exception as exc:  # noqa: BLE001 - a bad entry must not stop the queue
                        entry["state"] = "failed"
                        entry["note"] = f"could not start: {exc}"
                    self._save()
                    return

    def start_thread(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="run-queue", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stopping:
            try:
                self.step()
            except Exception:  # noqa: BLE001 - keep the runner alive; the next pass retries
                pass
            self._wake.wait(self.poll_seconds)
            self._wake.clear()

