"""Reattaching after an app restart, and telling a crash from a running run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ot_gradio.runner import supervisor
from ot_gradio.runner.rundir import EventWriter, create_run
from ot_gradio.runner.supervisor import Supervisor


def test_a_new_supervisor_reattaches_and_sees_a_crash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = create_run("ws", {"seed": 1})  # a relative workspace, as a config writes it
    EventWriter(run).status("training")
    # stands in for a worker: a process whose command line names the run folder
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run.path.resolve())])
    run.pid_file.write_text(str(proc.pid))
    # between fork and exec the child still shows pytest's command line: wait for its own
    deadline = time.time() + 30
    while time.time() < deadline and str(run.path.resolve()) not in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"):
        time.sleep(0.02)
    try:
        restarted = Supervisor("ws")  # the page after an app restart knows only the folder
        [found] = restarted.runs()
        state = restarted.state(found)
        assert state.alive and state.status == "training"
        assert [r.path for r in restarted.active_runs()] == [found.path]
    finally:
        proc.kill()
        proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and Supervisor("ws").state(found).alive:
        time.sleep(0.1)
    state = Supervisor("ws").state(found)
    assert state.status == "crashed" and "exit code unknown" in state.message


def test_a_reused_pid_is_not_mistaken_for_the_worker(tmp_path):
    run = create_run(tmp_path / "ws", {"seed": 1})
    EventWriter(run).status("training")
    run.pid_file.write_text(str(os.getpid()))  # alive, but not a worker of this run
    assert Supervisor(tmp_path / "ws").state(run).status == "crashed"


# A stand-in worker: says "training", waits for the page's stop, then spends `busy` seconds in the
# status given (a backup or model write on a slow disk, a big model) before it says "stopped".
FAKE_WORKER = """
import json, sys, time
from pathlib import Path
run, status, busy = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
def emit(**event):
    with open(run / "events.jsonl", "a") as fh:
        fh.write(json.dumps({"time": round(time.time(), 3), **event}) + "\\n")
emit(type="status", status="training", message="")
while not (run / "control" / "stop").exists():
    time.sleep(0.02)
emit(type="status", status=status, message="")
time.sleep(busy)
emit(type="status", status="stopped", message="model saved")
"""


def _fake_worker(run, status, busy):
    proc = subprocess.Popen([sys.executable, "-c", FAKE_WORKER, str(run.path.resolve()), status, str(busy)], start_new_session=True)
    run.pid_file.write_text(str(proc.pid))
    deadline = time.time() + 30  # its own command line (naming the run), and its first event
    while time.time() < deadline and not (run.events.exists() and str(run.path.resolve()) in
                                          Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")):
        time.sleep(0.02)
    return proc


def _stop_and_poll(sup, run, proc, seconds):
    """Press Stop, then poll as the page does (check_stop_timeouts on every tick)."""
    assert sup.stop(run) == "stop requested"
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None:
        sup.check_stop_timeouts()
        time.sleep(0.05)
    try:
        return proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("status", ["backup", "saving"])
def test_the_grace_period_never_kills_a_stop_writing_its_backup_or_model(status, tmp_path, monkeypatch):
    """The stop's backup (or model) takes longer than the grace period: it is left to finish, and
    the run ends as stopped, not killed half-written and shown as crashed."""
    monkeypatch.setattr(supervisor, "STOP_GRACE_SECONDS", 0.3)
    run = create_run(tmp_path / "ws", {"seed": 1})
    sup = Supervisor(tmp_path / "ws")
    proc = _fake_worker(run, status, busy=1.5)
    assert _stop_and_poll(sup, run, proc, 20) == 0
    assert sup.state(run).status == "stopped"


def test_a_stop_with_no_news_escalates_after_the_grace_period_and_a_second_stop_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor, "STOP_GRACE_SECONDS", 0.3)
    run = create_run(tmp_path / "ws", {"seed": 1})
    sup = Supervisor(tmp_path / "ws")
    proc = _fake_worker(run, "training", busy=60)  # says nothing after the stop: stuck
    started = time.time()
    assert _stop_and_poll(sup, run, proc, 20) == -signal.SIGTERM
    assert time.time() - started < 10

    run = create_run(tmp_path / "ws", {"seed": 2})
    proc = _fake_worker(run, "backup", busy=60)  # writing its backup: only a second Stop ends it
    assert sup.stop(run) == "stop requested"
    deadline = time.time() + 10
    while time.time() < deadline and not (run.events.exists() and '"backup"' in run.events.read_text()):
        time.sleep(0.02)
    time.sleep(0.5)
    sup.check_stop_timeouts()
    assert proc.poll() is None
    assert sup.stop(run) == "terminated"
    assert proc.wait(10) == -signal.SIGTERM
