"""Expected errors (the user's config, data, disk, model) end a run with their one-line message;
their traceback goes only into the run's log.txt. A bug's traceback is shown as well. Every run
folder has its log.txt, runs of `train` in a terminal included."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ot_gradio.runner.rundir import create_run
from ot_gradio.runner.worker import run_worker
from ot_gradio.ui.state import preset_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(tmp_path):
    """A run of the demo config whose concept folder does not exist (train's own checks would
    refuse it earlier; the worker must still say so in one line)."""
    config = preset_config("demo")
    config["concepts"] = [{**config["concepts"][0], "path": str(tmp_path / "gone")}]
    config["workspace_dir"] = str(tmp_path / "ws")
    return create_run(tmp_path / "ws", config)


def final_status(run) -> dict:
    events = [json.loads(line) for line in run.events.read_text().splitlines() if line.strip()]
    return [e for e in events if e["type"] == "status"][-1]


def test_an_expected_error_is_one_line_with_the_traceback_in_log_txt(run, capsys):
    echoed = []
    assert run_worker(run.path, echo=echoed.append) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    status = final_status(run)
    assert status["status"] == "error" and "concepts[0]" in status["message"] and "gone" in status["message"]
    log = run.log.read_text()
    assert log.count("Traceback (most recent call last)") == 1 and "TrainingError" in log
    assert "[status]" in log and "reading the config" in log  # the run's news, as in a worker's log
    assert echoed and echoed[-1]["status"] == "error"


def test_a_bug_shows_its_traceback_and_logs_it(run, capsys, monkeypatch):
    from ot_gradio.training import trainer

    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(trainer.Trainer, "setup", broken)
    assert run_worker(run.path) == 1
    assert "Traceback" in capsys.readouterr().err and "RuntimeError: boom" in run.log.read_text()
    assert final_status(run)["message"] == "RuntimeError: boom (see log.txt)"


def test_a_worker_writing_into_log_txt_logs_the_traceback_once(run):
    """As the page starts it: stdout and stderr into log.txt; nothing is written twice."""
    with open(run.log, "ab") as log:
        code = subprocess.run([sys.executable, "-m", "ot_gradio.runner.worker", str(run.path)], stdout=log,
                              stderr=subprocess.STDOUT, cwd=ROOT, timeout=600).returncode
    assert code == 1
    text = run.log.read_text()
    assert text.count("Traceback (most recent call last)") == 1 and "TrainingError" in text
    assert "[status]" not in text  # the events are in events.jsonl; the log is the process's output
    assert "concepts[0]" in final_status(run)["message"]
