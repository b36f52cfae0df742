"""Takes the README's screenshot: the page during a run of the offline demo, at 1600x1000.

Starts app.py on a free port in a temporary folder, picks the demo preset in Chromium (Playwright,
/usr/bin/chromium), presses Start, waits for the loss chart and a sample, and saves the Run tab.

    .venv/bin/python scripts/screenshot_page.py [--out docs/images/page-run.png]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_text(page, selector: str, pattern: str, timeout: float) -> None:
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = page.locator(selector).inner_text()
        if re.search(pattern, text):
            return
        time.sleep(0.5)
    raise SystemExit(f"{selector} never showed {pattern!r}; last text: {text[-300:]}")


def _wait_for_app(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=15)
            return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    raise SystemExit("app.py did not serve the page: " + log.read_text()[-2000:])


def _drive(url: str, out: Path, steps: int) -> None:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415  only this script needs it

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(url)
        box = page.locator("#preset input").first
        box.click()
        box.fill("demo")
        page.get_by_role("option", name="demo", exact=True).first.click()
        page.wait_for_timeout(1500)
        page.get_by_role("tab", name="Training", exact=True).click()
        epochs = page.locator("#f-epochs input, #f-epochs textarea").first
        epochs.fill("200")
        epochs.press("Tab")
        page.wait_for_timeout(1000)
        page.locator("#start").click()
        page.get_by_role("tab", name="Run", exact=True).click()
        _wait_text(page, "#run-status", r"training", 600)
        page.locator("#sample-now").click()
        page.locator("#sample-gallery img").first.wait_for(timeout=600_000)
        _wait_text(page, "#run-progress", rf"step (\d{{2,}}|[{steps}-9])/\d+", 900)
        page.locator("#loss-plot canvas, #loss-plot svg").first.wait_for(timeout=60_000)
        page.wait_for_timeout(3000)
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        page.locator("#stop").click()
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "page-run.png")
    parser.add_argument("--steps", type=int, default=8, help="train this many steps (1-9) before the screenshot")
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        log = cwd / "app.log"
        env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        with open(log, "wb") as log_file:
            proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--workspace", "workspace"],
                                    cwd=cwd, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_for_app(f"http://127.0.0.1:{port}/", proc, log)
            _drive(f"http://127.0.0.1:{port}/", args.out, max(1, min(9, args.steps)))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            for pid_file in cwd.rglob("worker.pid"):  # a worker still training would outlive the app
                try:
                    os.killpg(int(pid_file.read_text()), 9)
                except (OSError, ValueError):
                    pass
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
