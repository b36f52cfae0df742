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
