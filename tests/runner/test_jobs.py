"""Tool jobs in a worker process: events, result, cancel (asked, then killed), errors, crashes.

A test job is injected into the worker through a `sitecustomize` module on PYTHONPATH, so the
real `python -m ot_gradio.runner.job_worker` runs it."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from ot_gradio.runner.job_worker import run_job_dir
from ot_gradio.runner.jobs import JobDir, JobSupervisor
from ot_gradio.tools import jobs as jobs_module

TEST_JOBS = '''
import time
from ot_gradio.tools.jobs import JOBS, JobError

def counting(params, job):
    done = 0
    for i in range(params["n"]):
        if job.cancelled():
            break
        time.sleep(params.get("sleep", 0))
        done += 1
        job.progress(done, params["n"], f"item {i}")
        job.log(f"did {i}")
    return {"done": done, "message": f"{done} items"}

def ignores_cancel(params, job):
    time.sleep(600)

def refuses(params, job):
    raise JobError("folder: 'x' does not exist")

def crashes(params, job):
    raise ZeroDivisionError("boom")

def dies(params, job):
    import os
    os._exit(3)

for name in ("counting", "ignores_cancel", "refuses", "crashes", "dies"):
    JOBS[name] = "test_jobs_impl:" + name
'''


@pytest.fixture
def sup(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "test_jobs_impl.py").write_text(TEST_JOBS)
    (lib / "sitecustomize.py").write_text("import test_jobs_impl\n")
    root = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": os.pathsep.join([str(lib), str(root)])}
    s = JobSupervisor(tmp_path / "ws")
    s.env = env
    return s


def _start(sup, name, params):
    return sup.start(name, params, env=sup.env)


def _wait_status(sup, job, timeout=60):
    assert sup.wait(job, timeout) is not None, "job did not end"
    return sup.state(job)


def test_a_job_reports_progress_log_and_result(sup):
    job = _start(sup, "counting", {"n": 3})
    state = _wait_status(sup, job)
    assert state.status == "done", state.message
    assert (state.done, state.total) == (3, 3)
    assert state.log == ["did 0", "did 1", "did 2"]
    assert state.result == {"done": 3, "message": "3 items"}
    assert state.message == "3 items"
    assert json.loads(job.params.read_text())["params"] == {"n": 3}


def test_cancel_is_asked_first_and_keeps_the_result(sup):
    job = _start(sup, "counting", {"n": 200, "sleep": 0.05})
    deadline = time.time() + 60
    while sup.state(job).done < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert sup.cancel(job) == "cancel requested"
    state = _wait_status(sup, job)
    assert state.status == "cancelled"
    assert 2 <= state.result["done"] < 200


def test_a_second_cancel_kills_a_job_that_does_not_listen(sup):
    job = _start(sup, "ignores_cancel", {})
    deadline = time.time() + 60
    while not sup.state(job).status == "running" and time.time() < deadline:
        time.sleep(0.05)
    assert sup.cancel(job) == "cancel requested"
    assert sup.cancel(job) == "killed"
    state = _wait_status(sup, job, 20)
    assert state.status == "crashed" and not state.alive


@pytest.mark.parametrize(("name", "status", "text"), [
    ("refuses", "error", "folder: 'x' does not exist"),
    ("crashes", "error", "ZeroDivisionError: boom"),
    ("dies", "crashed", "exit code 3"),
    ("no_such_job", "error", "unknown job 'no_such_job'"),
])
def test_failures_are_reported_with_their_reason(sup, name, status, text):
    job = _start(sup, name, {})
    state = _wait_status(sup, job)
    assert state.status == status
    assert text in state.message
    if name == "crashes":
        assert "Traceback" in job.log.read_text()


def test_inline_worker_honours_a_cancel_requested_before_start(tmp_path, monkeypatch):
    monkeypatch.setitem(jobs_module.JOBS, "report", "ot_gradio.tools.report:run_job")
    job = JobDir(tmp_path / "j").make()
    job.params.write_text(json.dumps({"name": "report", "params": {"config": {"concepts": [{"path": str(tmp_path)}]}}}))
    job.request_cancel()
    assert run_job_dir(job.path) == 0
    statuses = [e["status"] for e in job.iter_events() if e["type"] == "status"]
    assert statuses == ["running", "cancelled"]


def test_job_ids_cannot_walk_out_of_the_jobs_folder(tmp_path):
    sup = JobSupervisor(tmp_path)
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(ValueError):
            sup.get(bad)


def test_the_job_modules_keep_torch_out_of_the_page():
    import subprocess

    code = "import sys, ot_gradio.runner.jobs, ot_gradio.tools.jobs, ot_gradio.ui.job_panel, ot_gradio.ui.tools_tab; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"
