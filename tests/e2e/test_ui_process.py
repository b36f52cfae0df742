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
