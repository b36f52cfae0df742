"""The run monitor without a browser: which run a page follows, a failed run's one-line reason,
and what each poll sends (ui/monitor.py)."""

import subprocess
import sys
import time

import gradio as gr
import pytest

from ot_gradio.runner.rundir import EventWriter, create_run
from ot_gradio.runner.supervisor import RunState, Supervisor
from ot_gradio.ui.monitor import Monitor, bar_markdown, status_markdown


@pytest.fixture
def monitor(tmp_path):
    with gr.Blocks():
        m = Monitor(tmp_path, Supervisor(tmp_path))
        m.build_bar()
        m.build_run_tab()
    return m


def live_run(workspace, procs):
    """A run whose stand-in process names its folder (as the worker's does): active."""
    run = create_run(workspace, {})
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run.path.resolve())])
    run.pid_file.write_text(str(proc.pid))
    procs.append(proc)
    return run


@pytest.fixture
def procs():
    started = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_page_follows_the_run_the_queue_started(monitor, tmp_path, procs):
    stopped = create_run(tmp_path, {})
    EventWriter(stopped).status("stopped")
    (stopped.path / "exit_code").write_text("0")
    assert monitor.followed(str(stopped.path)) == str(stopped.path)  # nothing newer: it stays
    time.sleep(1.1)  # run ids sort by the second they were made in
    queued = live_run(tmp_path, procs)  # started by the queue, not by this page
    assert monitor.followed(str(stopped.path)) == str(queued.path)
    assert monitor.render(str(stopped.path))[0] == str(queued.path)
    assert monitor.followed(str(queued.path)) == str(queued.path)
    # the queued run ended (and maybe a second one too) between two polls: the newest is shown
    procs[0].kill()
    procs[0].wait()
    EventWriter(queued).status("done")
    assert monitor.followed(str(stopped.path)) == str(queued.path)


def test_a_failed_run_says_its_reason_in_one_line_and_no_traceback():
    state = RunState("r", status="error",
                     message="ValueError: concept 'cats' has no images\nTraceback (most recent call last):\n  File \"x.py\"")
    bar = bar_markdown(state)
    assert "**error**" in bar and "concept 'cats' has no images" in bar and "Traceback" not in bar
    assert "Traceback" not in status_markdown(state)


def test_a_validating_run_has_its_validation_series_from_the_first_draw(monitor, tmp_path, procs):
    """The chart fixes its series when first drawn: a page drawn (or reloaded) before the first
    validation showed no validation line for the rest of the run."""
    run = live_run(tmp_path, procs)
    run.config.write_text('{"validation": true}')
    events = EventWriter(run)
    events.emit("metrics", global_step=1, loss=0.5)
    first = monitor.poll(str(run.path), "")
    assert list(first[3]["value"]["series"]) == ["loss", "smoothed", "validation"]
    assert first[3]["value"]["loss"].isna().tolist() == [False, False, True]  # a blank point: nothing drawn
    events.emit("validation", global_step=2, loss=0.4)  # read by every poll, of every page, after a reload too
    second = monitor.poll(str(run.path), first[-1])
    assert second[3]["value"][second[3]["value"]["series"] == "validation"]["loss"].tolist() == [0.4]
    procs[0].kill()  # the validating run ended: the page shown the next run follows that one alone
    procs[0].wait()
    plain = live_run(tmp_path, procs)  # no validation: no such series
    EventWriter(plain).emit("metrics", global_step=1, loss=0.5)
    assert "validation" not in set(monitor.poll(str(plain.path), "")[3]["value"]["series"])


def test_a_sample_the_page_could_not_load_is_sent_again(monitor, tmp_path, procs, monkeypatch):
    from PIL import Image

    run = live_run(tmp_path, procs)
    image = run.samples / "step1.png"
    Image.new("RGB", (8, 8), "red").save(image)
    EventWriter(run).emit("sample", path=str(image), prompt="a red square", step=1)
    real = monitor.gallery.move_resource_to_block_cache
    monkeypatch.setattr(monitor.gallery, "move_resource_to_block_cache", lambda p: (_ for _ in ()).throw(OSError("busy")))
    first = monitor.poll(str(run.path), "")
    assert "<img" not in (first[5] or "")
    monkeypatch.setattr(monitor.gallery, "move_resource_to_block_cache", real)
    second = monitor.poll(str(run.path), first[-1])
    assert "<img" in second[5] and "a red square" in second[5]


def test_start_refuses_an_empty_concept_folder_as_validate_and_train_do(tmp_path):
    from ot_gradio.config.io import load_config
    from ot_gradio.runner.startcheck import start_problems
    from ot_gradio.ui.page import validate
    from ot_gradio.ui.state import preset_config

    empty = tmp_path / "my-cats"
    empty.mkdir()
    (empty / "cat.txt").write_text("a caption without its image")
    config = preset_config("demo", tmp_path)
    config["concepts"][0]["path"] = str(empty)
    valid, problems, _ = validate(config)
    expected = [p for p in start_problems(load_config(config).config, config) if p.startswith("concepts[0]")]
    assert expected and "has no images" in expected[0]
    assert problems == expected, problems  # the page's Start lists what `validate` and `train` refuse
