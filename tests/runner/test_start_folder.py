"""The app started from another folder (`cd /tmp && python /repo/app.py`, no PYTHONPATH): its
workers and tool jobs still import ot_gradio, and a worker that dies while importing shows why."""

from __future__ import annotations

import os

import pytest

from ot_gradio.runner.jobs import JobSupervisor
from ot_gradio.runner.supervisor import Supervisor


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The process's folder is not the repository and nothing names it on PYTHONPATH."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return tmp_path


def test_a_tool_job_started_from_another_folder_runs(elsewhere):
    sup = JobSupervisor(elsewhere / "ws")
    job = sup.start("no-such-tool", {})
    assert sup.wait(job, 120) is not None
    state = sup.state(job)
    # the worker imported ot_gradio and answered; without the package's path it crashed at import
    assert state.status == "error" and "unknown job 'no-such-tool'" in state.message, state.message


def test_a_run_started_from_another_folder_runs(elsewhere):
    sup = Supervisor(elsewhere / "ws")
    run = sup.start({"model_type": "NO_SUCH_MODEL"})
    assert sup.wait(run, 300) is not None
    state = sup.state(run)
    assert state.status == "error", (state.status, state.message, state.log_tail)
    assert "No module named" not in state.log_tail


def test_a_worker_that_dies_at_import_says_why(elsewhere):
    lib = elsewhere / "lib"
    lib.mkdir()
    # stands in for a broken install: the worker's module cannot be imported
    (lib / "sitecustomize.py").write_text("import sys\nsys.modules['ot_gradio'] = None\n")
    sup = Supervisor(elsewhere / "ws")
    run = sup.start({"seed": 1}, env={"PYTHONPATH": str(lib)})
    assert sup.wait(run, 120) not in (None, 0)
    state = sup.state(run)
    assert state.status == "crashed"
    assert "ModuleNotFoundError" in state.message and "ot_gradio" in state.message, state.message
    assert os.path.exists(run.log)
