"""A page built in a fresh folder (it is also the working folder, as for `python app.py`), and a
stand-in for starting the training worker."""

import subprocess
import sys
from pathlib import Path

import pytest

from ot_gradio.runner.rundir import create_run


@pytest.fixture
def page(tmp_path, monkeypatch):
    """The page, with a stand-in TensorBoard: a cheap sleeping process with TensorBoard's
    arguments on its command line."""
    from ot_gradio.runner import tensorboard
    from ot_gradio.ui.page import Page

    real = tensorboard.command
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    monkeypatch.setattr(tensorboard, "command", lambda *args: [*sleeper, *real(*args)[1:]])
    monkeypatch.chdir(tmp_path)
    page = Page(tmp_path / "workspace", roots=[tmp_path])
    yield page
    page.tensorboard.stop()


@pytest.fixture
def fake_start(page, monkeypatch):
    """supervisor.start that makes the run folder and a stand-in process whose command line
    names the run (as the worker's does), instead of training."""
    started = []

    def start(config, env=None, workspace=None):
        run = create_run(Path(workspace or page.workspace).resolve(), config)
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(run.path.resolve())])
        run.pid_file.write_text(str(proc.pid))
        page.supervisor._procs[str(run.path.resolve())] = proc
        started.append((run, config, proc))
        return run

    monkeypatch.setattr(page.supervisor, "start", start)
    yield started
    for _, _, proc in started:
        proc.kill()
        proc.wait()
