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


def test_app_serves_the_page_and_nothing_outside_its_folders(tmp_path):
    """The page loads; files in the workspace are served, files in the current folder (here the
    repository: keys and tokens live in home folders) are not; an upload over the limit is refused."""
    import socket
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "in-workspace.txt").write_text("served")
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port), "--workspace", str(tmp_path), "--max-upload-mb", "1"],
        cwd=ROOT,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def status(url, data=None, headers=None):
        try:
            return urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers or {}), timeout=30).status
        except urllib.error.HTTPError as err:
            return err.code

    try:
        deadline = time.time() + 90
        body = ""
        while time.time() < deadline and proc.poll() is None:
            try:
                body = urllib.request.urlopen(f"{base}/", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert "ot_gradio" in body or "gradio" in body.lower(), proc.stdout.read().decode()[-2000:] if proc.poll() is not None else "no page"
        assert status(f"{base}/gradio_api/file={tmp_path / 'in-workspace.txt'}") == 200
        assert status(f"{base}/gradio_api/file={ROOT / 'README.md'}") in (403, 404)
        assert status(f"{base}/gradio_api/file=/etc/passwd") in (403, 404)

        def upload(size):
            boundary = "otgradioboundary"
            payload = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"c.json\"\r\n"
                       f"Content-Type: application/json\r\n\r\n").encode() + b"x" * size + f"\r\n--{boundary}--\r\n".encode()
            return status(f"{base}/gradio_api/upload", payload, {"Content-Type": f"multipart/form-data; boundary={boundary}"})

        def upload_headers_only(size):
            """The over-limit upload announced by its Content-Length with 'Expect: 100-continue': the
            guard must refuse it before reading the body. (Sending the body too made the test flaky:
            the server answers 413 and closes while the client is still writing, a broken pipe.)"""
            with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
                conn.sendall((f"POST /gradio_api/upload HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                              f"Content-Type: multipart/form-data; boundary=otgradioboundary\r\n"
                              f"Content-Length: {size}\r\nExpect: 100-continue\r\n\r\n").encode())
                head = conn.recv(4096).decode("latin-1")
            return int(head.split()[1])

        assert upload(10_000) == 200
        assert upload_headers_only(2 * 1024 * 1024) == 413
        assert upload(10_000) == 200  # and the server still answers
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
