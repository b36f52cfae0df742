"""The page process never imports torch, diffusers or transformers."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_page_builds_without_torch(tmp_path):
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from ot_gradio.ui.page import build_page\n"
        "build_page(Path(sys.argv[1]))\n"
        "bad = [m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_share_without_password_is_refused(tmp_path):
    out = subprocess.run(
        [sys.executable, "app.py", "--share", "--workspace", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--auth" in out.stderr


def test_app_serves_the_page(tmp_path):
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port), "--workspace", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 90
        body = ""
        while time.time() < deadline and proc.poll() is None:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert "ot_gradio" in body or "gradio" in body.lower(), proc.stdout.read().decode()[-2000:] if proc.poll() is not None else "no page"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_app_exit_stops_tensorboard(tmp_path):
    """'TensorBoard always on' starts it with the app; stopping the app (SIGTERM) stops it."""
    import json
    import socket
    import time
    import urllib.request

    from ot_gradio.ui.state import UI_CONFIG, preset_config

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    port, tb_port = free_port(), free_port()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    config = {**preset_config("demo"), "tensorboard": True, "tensorboard_always_on": True, "tensorboard_port": tb_port}
    (workspace / UI_CONFIG).write_text(json.dumps(config))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--workspace", str(workspace)],
        cwd=tmp_path, env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )

    def answers() -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{tb_port}/", timeout=5)
            return True
        except OSError:
            return False

    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None and not answers():
            time.sleep(0.5)
        assert answers(), (workspace / "tensorboard.log").read_text()[-2000:] if (workspace / "tensorboard.log").exists() else "no log"
        proc.terminate()
        proc.wait(timeout=60)
        deadline = time.time() + 30
        while time.time() < deadline and answers():
            time.sleep(0.5)
        assert not answers()
        left = []
        for cmd in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                args = cmd.read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "tensorboard.main" in args and str(workspace) in args:
                left.append(args)
        assert not left
    finally:
        if proc.poll() is None:
            proc.kill()
