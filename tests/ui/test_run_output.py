"""The Run tab after a run: where its model is on the machine (absolute), its download, and a
Stop the bar says it is carrying out (ui/monitor.py, ui/run_output.py). No browser."""

import json
import subprocess
import sys

import gradio as gr
import pytest

from ot_gradio.runner.rundir import EventWriter, create_run
from ot_gradio.runner.supervisor import Supervisor
from ot_gradio.runner.tensorboard import TensorBoard
from ot_gradio.ui.monitor import Monitor

DOWNLOAD = -2  # poll's outputs end with the download button and the key


@pytest.fixture
def monitor(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the app's folder: a relative output file is written here
    with gr.Blocks():
        m = Monitor(tmp_path / "ws", Supervisor(tmp_path / "ws"))
        m.build_bar()
        m.build_run_tab()
    return m


def ended_run(workspace, output: str, path_written: str, status: str = "done"):
    run = create_run(workspace, {"output_model_destination": output})
    run.config.write_text(json.dumps({"output_model_destination": output}))
    events = EventWriter(run)
    events.emit("saved", path=path_written, kind="model")
    events.status(status, f"model saved to {path_written}")
    run.exit_file.write_text("0")
    return run


def test_a_relative_output_file_is_shown_where_it_is_and_offered_for_download(monitor, tmp_path):
    model = tmp_path / "models" / "mycat.safetensors"
    model.parent.mkdir()
    model.write_bytes(b"x" * 3_000_000)
    run = ended_run(tmp_path / "ws", "models/mycat.safetensors", "models/mycat.safetensors")
    out = monitor.poll(str(run.path), "")
    status = out[1]
    assert f"saved: `{model}`" in status and f"model saved to {model}" in status  # not "models/mycat..."
    download = out[DOWNLOAD]
    assert download["visible"] is True and download["label"] == "Download mycat.safetensors (3 MB)"
    copy = download["value"]
    assert copy != str(model) and open(copy, "rb").read() == model.read_bytes()  # gradio's copy, which it serves
    again = monitor.poll(str(run.path), out[-1])
    assert again[DOWNLOAD] is gr.skip() or again[DOWNLOAD] == gr.skip()  # not copied and sent anew every second


def test_no_download_while_the_run_trains_nor_of_a_file_the_run_may_not_name(monitor, tmp_path):
    elsewhere = tmp_path / "secret.bin"
    elsewhere.write_bytes(b"s")
    tampered = ended_run(tmp_path / "ws", "models/mycat.safetensors", str(elsewhere))  # not its output file, not in the workspace
    assert monitor.poll(str(tampered.path), "")[DOWNLOAD]["visible"] is False

    model = tmp_path / "models" / "live.safetensors"
    model.parent.mkdir()
    model.write_bytes(b"x")
    live = create_run(tmp_path / "ws", {})
    live.config.write_text(json.dumps({"output_model_destination": str(model)}))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(live.path.resolve())])
    try:
        live.pid_file.write_text(str(proc.pid))
        EventWriter(live).emit("saved", path=str(model), kind="model")  # Save now, mid-run
        assert monitor.poll(str(live.path), "")[DOWNLOAD]["visible"] is False
    finally:
        proc.kill()
        proc.wait()


def test_a_diffusers_folder_is_not_offered_and_its_place_is_said(monitor, tmp_path):
    folder = tmp_path / "models" / "finetune"
    folder.mkdir(parents=True)
    run = ended_run(tmp_path / "ws", "models/finetune", "models/finetune")
    out = monitor.poll(str(run.path), "")
    assert out[DOWNLOAD]["visible"] is False
    assert f"not one file: the page cannot download it. It is on the machine running the app, at `{folder}`" in out[1]


def test_after_stop_the_bar_says_the_run_is_stopping_until_it_ends(monitor, tmp_path):
    run = create_run(tmp_path / "ws", {})
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run.path.resolve())])
    try:
        run.pid_file.write_text(str(proc.pid))
        events = EventWriter(run)
        events.emit("progress", phase="training", epoch=1, epochs=1, step=3, steps_per_epoch=400, global_step=3, total_steps=400,
                    it_s=0.05, eta_s=7940)
        events.status("training")
        bar = monitor.render(str(run.path))[-1]
        assert bar.startswith("**training**") and "ETA" in bar
        monitor.supervisor.stop(run)  # the first Stop: a request the worker reads between steps
        bar, status = monitor.render(str(run.path))[-1], monitor.render(str(run.path))[1]
        assert bar.startswith("**stopping** · finishing the step, then writing a backup and the model") and "ETA" not in bar
        assert "step 3/400" in bar and status.startswith("**stopping** (Stop requested)")
        events.status("backup")
        assert "writing a backup, then the model" in monitor.render(str(run.path))[-1]
        events.status("saving")
        assert "writing the model, then it ends" in monitor.render(str(run.path))[-1]
        events.status("stopped", "model saved to x")
        proc.kill()
        proc.wait()
        assert monitor.render(str(run.path))[-1].startswith("**stopped**")
    finally:
        proc.kill()
        proc.wait()


def test_a_stop_while_loading_says_loading_goes_on_first(monitor, tmp_path):
    run = create_run(tmp_path / "ws", {})
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run.path.resolve())])
    try:
        run.pid_file.write_text(str(proc.pid))
        EventWriter(run).status("loading", "loading tiny:sd15")
        monitor.supervisor.stop(run)
        assert monitor.render(str(run.path))[-1].startswith("**stopping** · loading goes on, then one step, a backup and the model")
    finally:
        proc.kill()
        proc.wait()


def test_the_tensorboard_link_says_it_opens_on_the_app_machine(tmp_path, monkeypatch):
    tb = TensorBoard()
    monkeypatch.setattr(tb, "proc", subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]))
    tb.key = (str(tmp_path), 6006, "127.0.0.1")
    try:
        text = tb.status_markdown()
        assert "[Open TensorBoard](http://127.0.0.1:6006/)" in text
        assert "opens on the machine that runs the app: a share link or Colab does not carry it" in text
    finally:
        tb.proc.kill()
        tb.proc.wait()


def test_a_model_over_the_offered_size_is_not_copied_unasked_and_the_runs_tab_is_named(monitor, tmp_path, monkeypatch):
    """gradio hashes and copies a download into its cache: a fine-tune's many GB are not copied on a poll."""
    from ot_gradio.ui import run_output

    monkeypatch.setattr(run_output, "OFFERED_BYTES", 1000)
    model = tmp_path / "models" / "big.safetensors"
    model.parent.mkdir()
    model.write_bytes(b"x" * 2000)
    run = ended_run(tmp_path / "ws", "models/big.safetensors", "models/big.safetensors")
    out = monitor.poll(str(run.path), "")
    assert out[DOWNLOAD]["visible"] is False and not monitor.output_download._copies
    assert "download it from Runs → this run → *Open* → *Download output file*" in out[1]
