"""Reattaching after an app restart, and telling a crash from a running run."""

import os
import subprocess
import sys
import time
from pathlib import Path

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
