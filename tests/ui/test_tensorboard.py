"""TensorBoard as a child process of the page: started on the run's logdir, stopped after."""

import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

from ot_gradio.runner.rundir import EventWriter, create_run
from ot_gradio.runner.tensorboard import TensorBoard, command, settings

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmdline(pid: int) -> list[str]:
    """The process's command line, once it has exec'd."""
    deadline = time.time() + 10
    while time.time() < deadline:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        if "--logdir" in args:
            return args
        time.sleep(0.05)
    return args


def gone(pid: int, timeout: float = 15) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.split(") ")[-1].split(" ")[0] == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.2)
    return False


def test_settings_honour_port_expose_and_always_on():
    assert settings({"tensorboard": True}) == (True, 6006, "127.0.0.1", False)
    assert settings({"tensorboard": True, "tensorboard_port": 7007, "tensorboard_expose": True, "tensorboard_always_on": True}) == (
        True, 7007, "0.0.0.0", True)
    assert command(Path("/x/tb"), 7007, "127.0.0.1")[1:] == ["-m", "tensorboard.main", "--logdir", "/x/tb", "--port", "7007", "--host", "127.0.0.1"]


def test_real_tensorboard_serves_the_logdir_and_stops(tmp_path):
    logdir = tmp_path / "run" / "tensorboard"
    port = free_port()
    tb = TensorBoard(tmp_path / "tb.log")
    url = tb.ensure(logdir, port)
    pid = tb.proc.pid
    try:
        args = cmdline(pid)
        assert args[:3] == [sys.executable, "-m", "tensorboard.main"]
        assert args[args.index("--logdir") + 1] == str(logdir.resolve()) and args[args.index("--port") + 1] == str(port)
        assert args[args.index("--host") + 1] == "127.0.0.1"
        assert tb.ensure(logdir, port) == url and tb.proc.pid == pid  # polled again: not restarted
        deadline, body = time.time() + 120, ""
        while time.time() < deadline and tb.running:
            try:
                body = urllib.request.urlopen(url, timeout=5).read().decode(errors="replace")
                break
            except OSError:
                time.sleep(0.5)
        assert "TensorBoard" in body or "tensorboard" in body, (tmp_path / "tb.log").read_text()[-2000:]
        assert f"127.0.0.1:{port}" in tb.status_markdown()
    finally:
        tb.stop()
    assert gone(pid) and not tb.running and tb.status_markdown() == ""


def test_tensorboard_stops_when_the_app_exits(tmp_path):
    """The app's exit (end of main, Ctrl-C, or SIGTERM through launch's handler) stops it."""
    script = textwrap.dedent(f"""
        import signal, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from ot_gradio.runner import tensorboard
        tensorboard.command = lambda *a: [sys.executable, "-c", "import time; time.sleep(300)", *a[:0]]
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as launch.main does
        tb = tensorboard.TensorBoard()
        tb.ensure(Path({str(tmp_path)!r}) / "tb")
        print(tb.proc.pid, flush=True)
        time.sleep(60)
    """)
    app = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(app.stdout.readline())
    assert not gone(pid, timeout=0.5)
    app.terminate()
    app.wait(timeout=30)
    assert gone(pid)


def test_page_starts_tensorboard_with_the_run_and_stops_it_after(page, fake_start):
    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields["tensorboard_port"].component] = 7123
    out = page.on_start(values)
    (run, _, worker), = fake_start
    assert out[page.monitor.run_id] == str(run.path)
    args = cmdline(page.tensorboard.proc.pid)
    assert args[args.index("--logdir") + 1] == str(run.tensorboard.resolve())
    assert args[args.index("--port") + 1] == "7123"
    link = page.monitor.render(str(run.path))[6]
    assert "http://127.0.0.1:7123/" in link
    tb_pid = page.tensorboard.proc.pid
    # the run ends: the next poll stops TensorBoard and the link goes
    EventWriter(run).status("done")
    worker.kill()
    worker.wait()
    assert page.monitor.render(str(run.path))[6] == ""
    assert gone(tb_pid)


def test_reattach_starts_tensorboard_and_always_on_keeps_it(page, fake_start):
    values = page.form_values(page.on_page_load()[page.config_state])
    page.on_start(values)
    (run, _, worker), = fake_start
    page.tensorboard.stop()  # as after an app restart
    page.monitor.render("")  # a page reload reattaches to the running run
    args = cmdline(page.tensorboard.proc.pid)
    assert args[args.index("--logdir") + 1] == str(run.tensorboard.resolve())
    worker.kill()
    worker.wait()
    # with 'always on' TensorBoard shows every run of the workspace and outlives the run
    other = create_run(run.path.parent.parent, {**page.monitor.run_config(run), "tensorboard_always_on": True})
    page.monitor.render(str(other.path))
    args = cmdline(page.tensorboard.proc.pid)
    assert args[args.index("--logdir") + 1] == str(run.path.parent.resolve()) and page.tensorboard.running


def test_tensorboard_off_starts_nothing(page, fake_start):
    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields["tensorboard"].component] = False
    page.on_start(values)
    assert page.tensorboard.proc is None
    assert page.monitor.render(str(fake_start[0][0].path))[6] == ""


def test_a_page_showing_an_older_run_leaves_the_running_one_alone(page, fake_start):
    old = create_run(page.workspace, {"tensorboard": True})
    EventWriter(old).status("done")
    values = page.form_values(page.on_page_load()[page.config_state])
    page.on_start(values)
    (run, _, _), = fake_start
    pid = page.tensorboard.proc.pid
    for _ in range(3):  # two open pages, one still on the old run
        page.monitor.render(str(old.path))
        page.monitor.render(str(run.path))
    assert page.tensorboard.proc.pid == pid and page.tensorboard.serving(run.tensorboard)
