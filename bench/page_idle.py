"""How busy does the page keep the browser while nothing happens?

    .venv/bin/python bench/page_idle.py [--root DIR] [--seconds 10] [--rounds 3]

Starts `python app.py` from `--root` (default: this checkout; give another checkout to compare
before / after), opens the page in Chromium (Debian's, headless, as the browser tests do), waits
for it to load, edits one field (Epochs) as every user does, lets it settle, then for
`--seconds` measures:
- the main thread's busy share: Chrome's TaskDuration over the wall time (1.0 = a core taken);
- how many components Gradio's page refreshes on each status message of any event (its
  `loading_stati.current`, read through a logging breakpoint in Gradio's own bundle). Every
  component that was ever an input or a progress target of an event that ran stays there, and
  the run bar's timer sends status messages each second.
Repeated `--rounds` times with a fresh app and page; prints each round and the median.
A busy machine inflates the busy share (a task waiting for a core counts): compare runs made
side by side.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
MARK = "async update_loading_stati_state(){"


def breakpoint_at() -> tuple[str, int, int]:
    """The bundle, line and column just inside Gradio's update_loading_stati_state."""
    import gradio

    assets = Path(gradio.__file__).parent / "templates" / "frontend" / "assets"
    for path in sorted(assets.glob("Blocks-*.js")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            column = line.find(MARK)
            if column >= 0:
                return re.escape(path.name), number, column + len(MARK)
    raise SystemExit(f"{MARK!r} not found in gradio's bundle: this Gradio version differs; update the benchmark")


def start_app(root: Path, folder: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root)}
    proc = subprocess.Popen([sys.executable, str(root / "app.py"), "--port", str(port), "--workspace", "ws"], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(600):
        try:
            urllib.request.urlopen(url, timeout=5)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("app.py did not serve the page in 300 s")


def one_round(root: Path, seconds: float) -> tuple[float, int]:
    from playwright.sync_api import sync_playwright

    bundle, line, column = breakpoint_at()
    proc, url = start_app(root, tempfile.mkdtemp())
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            counts: list[int] = []
            page.on("console", lambda m: counts.append(int(m.text.split()[1])) if m.text.startswith("REFRESHED ") else None)
            page.goto(url)
            page.wait_for_selector("text=Start", timeout=120_000)
            page.wait_for_timeout(5000)  # the page's load events and the first polls
            page.get_by_role("tab", name="Training", exact=True).click()
            epochs = page.locator("#f-epochs input").first  # one edit, as every user makes
            epochs.click()
            epochs.press("Control+a")
            epochs.press_sequentially("3")
            epochs.press("Tab")
            page.wait_for_timeout(5000)

            def busy() -> float:
                return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "TaskDuration")

            before, t0 = busy(), time.time()
            page.wait_for_timeout(seconds * 1000)
            share = (busy() - before) / (time.time() - t0)
            cdp.send("Debugger.enable")
            cdp.send("Debugger.setBreakpointByUrl", {
                "urlRegex": bundle, "lineNumber": line, "columnNumber": column,
                "condition": "console.log('REFRESHED ' + Object.keys(this.loading_stati.current).length), false"})
            page.wait_for_timeout(3000)
            browser.close()
    finally:
        proc.terminate()
    return share, (counts[-1] if counts else -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py is started")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    shares, refreshed = [], []
    for i in range(args.rounds):
        share, count = one_round(args.root.resolve(), args.seconds)
        shares.append(share)
        refreshed.append(count)
        print(f"round {i + 1}: main thread busy {share:.2f} of the time; {count} components refreshed per status message", flush=True)
    print(f"median: busy {statistics.median(shares):.2f}; {statistics.median(refreshed):.0f} components refreshed ({args.root})")


if __name__ == "__main__":
    main()
