"""Five browser sessions watching one run: does anyone miss an event, does the app grow, does training slow?

    .venv/bin/python bench/browser_load.py [--minutes 10] [--browsers 5] [--baseline-minutes 2] [--sample-seconds 30] [--pin]

Starts the real app (`python app.py`) in a temporary folder with the offline `demo` preset (tiny
SD 1.5, CPU) set up for a long run through the workspace's ui-config.json, which the page loads:
100 000 epochs, a sample every --sample-seconds of training (time based, so both runs get samples
at the same rate), text encoder frozen (the demo trains it for 30 epochs only: the step time would
change mid-run), TensorBoard off (the app would start it as a child process).

1. Baseline: one page clicks Start, waits for "training" and closes its browser; the training
   steps/s are measured from events.jsonl over --baseline-minutes with no page open, then the run
   is stopped through its control folder (what the page's Stop does first).
2. Loaded: one page clicks Start on an identical run, N-1 more pages open and reattach (N browser
   contexts, i.e. N sessions, in one headless Chromium, background throttling off so every page's
   own 1-second gr.Timer keeps ticking). For --minutes the script samples the app process's RSS
   every 5 s and reads every page's DOM every ~15 s (shown step vs events.jsonl, gallery captions).
3. Stop is clicked in one page; every page must then show "stopped", the last global step of
   events.jsonl in its step bar, and in its gallery exactly the newest min(24, n) `sample` events
   (the monitor shows the last 24, newest first, captioned "step S: prompt"); every sample event
   must also have been seen in each page's gallery at some DOM read during the run.

RSS is the app process alone (VmRSS of `python app.py`); its children are the training worker
(reported separately, it is not the page's memory) and nothing else with TensorBoard off. CPU is
reported for the app, the worker and the browsers (Chromium + the Playwright driver) so a slowdown
on this 2-core machine can be attributed. Each page's polls are counted from its requests (one
queue/join per gr.Timer tick) with their round trip (the event's queue/data stream). The rate is
below 1/s even on an idle page (0.73/s measured once), and lower on a busy machine while the round
trips stay short: the browser's own timer and rendering set the pace, not the app.
Exits 1 if any page missed an event.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WARMUP_S = 10.0  # skipped after training starts / after the pages open, before a window is timed
CHUNK_S = 30.0  # steps/s is also computed per chunk of this length: the spread is the noise
STOPPED = r"(?m)^\s*stopped\b"  # the status markdown's first line; gradio may put a timing label above it
GALLERY_SHOWN = 24  # Monitor.render shows the newest 24 samples
EXTRA_CHROMIUM_ARGS = ["--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                       "--disable-backgrounding-occluded-windows"]


def _load(path: Path, name: str):
    """The browser suite's helpers (Chromium flags, free port, DOM waits), by file: tests/ is no package."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


browser_fixtures = _load(ROOT / "tests" / "browser" / "conftest.py", "browser_conftest")
page_helpers = _load(ROOT / "tests" / "browser" / "test_page.py", "browser_test_page")


# --- the run's events --------------------------------------------------------------------------
def read_events(run: Path) -> list[dict]:
    path = run / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written right now
    return out


def training_progress(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "progress" and e.get("phase") == "training"]


def window_rate(events: list[dict], t0: float, t1: float) -> dict:
    """Steps/s over [t0, t1] and over its CHUNK_S chunks; the median step time (sampling pauses show
    up in the rate, not in the median)."""
    prog = [e for e in training_progress(events) if t0 <= e["time"] <= t1]
    if len(prog) < 2:
        raise SystemExit(f"fewer than 2 training steps between {t0:.0f} and {t1:.0f}: the run is not training")
    rate = (prog[-1]["global_step"] - prog[0]["global_step"]) / (prog[-1]["time"] - prog[0]["time"])
    chunks = []
    start = t0
    while start + CHUNK_S <= t1 + 1e-6:
        part = [e for e in prog if start <= e["time"] < start + CHUNK_S]
        if len(part) >= 2:
            chunks.append((part[-1]["global_step"] - part[0]["global_step"]) / (part[-1]["time"] - part[0]["time"]))
        start += CHUNK_S
    gaps = [b["time"] - a["time"] for a, b in zip(prog, prog[1:], strict=False) if b["global_step"] == a["global_step"] + 1]
    return {"rate": rate, "steps": prog[-1]["global_step"] - prog[0]["global_step"], "chunks": chunks,
            "step_ms": 1000 * statistics.median(gaps) if gaps else float("nan")}


def wait_for(what: str, check, timeout: float, pause: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(pause)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


# --- process sampling ---------------------------------------------------------------------------
class Sampler(threading.Thread):
    """Every 5 s: the app's RSS, the worker's RSS, the 1-minute load average."""

    def __init__(self, app: psutil.Process):
        super().__init__(daemon=True)
        self.app = app
        self.rows: list[tuple[float, float, float, float]] = []  # time, app MB, worker MB, load
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                app_mb = self.app.memory_info().rss / 2**20
                worker_mb = sum(c.memory_info().rss for c in self.app.children(recursive=True)) / 2**20
            except psutil.Error:
                app_mb = worker_mb = float("nan")
            self.rows.append((time.time(), app_mb, worker_mb, os.getloadavg()[0]))
            self.halt.wait(5.0)

    def between(self, t0: float, t1: float) -> list[tuple[float, float, float, float]]:
        return [r for r in self.rows if t0 <= r[0] <= t1]


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def browser_procs(app: psutil.Process) -> list[psutil.Process]:
    """This script's descendants outside the app's tree: the Playwright driver and Chromium."""
    app_tree = {app.pid} | {c.pid for c in app.children(recursive=True)}
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in app_tree]


# --- the app and the pages -----------------------------------------------------------------------
def write_config(workspace: Path, sample_seconds: int) -> None:
    from ot_gradio.ui.state import preset_config, save_ui_config

    config = preset_config("demo")
    config.update({"epochs": 100_000, "tensorboard": False, "sample_after": sample_seconds, "sample_after_unit": "SECOND",
                   "sample_skip_first": 0, "backup_after_unit": "NEVER"})
    config["text_encoder"] = {**config["text_encoder"], "train": False}
    workspace.mkdir(parents=True, exist_ok=True)
    save_ui_config(workspace, config)


def start_app(work: Path) -> tuple[subprocess.Popen, str]:
    port = browser_fixtures._free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "OT_GRADIO_TINY_DIR": str(work / "tiny"), "PYTHONPATH": str(ROOT)}
    log = open(work / "app.log", "wb")
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--workspace", "workspace"],
                            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"

    def up() -> bool:
        if proc.poll() is not None:
            raise SystemExit("app.py exited: " + (work / "app.log").read_text()[-2000:])
        try:
            urllib.request.urlopen(url, timeout=15)
            return True
        except OSError:
            return False

    wait_for("app.py to serve the page", up, 300)
    return proc, url


class Polls:
    """One page's polls: when each queue join was sent, and how long each event's result stream
    (queue/data, one per event) took to finish, i.e. the poll's round trip."""

    def __init__(self) -> None:
        self.sent: list[float] = []
        self.round_trip_ms: list[tuple[float, float]] = []  # (finished at, ms)

    def on_request(self, request) -> None:
        if "/queue/join" in request.url:
            self.sent.append(time.time())

    def on_finished(self, request) -> None:
        if "/queue/data" in request.url:
            self.round_trip_ms.append((time.time(), request.timing.get("responseEnd", float("nan"))))


def open_page(browser, url: str, polls: Polls):
    """A new session (browser context) on the page, its polls recorded."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.on("request", polls.on_request)
    page.on("requestfinished", polls.on_finished)
    page.goto(url)
    page.locator("#start").wait_for(state="visible")
    return page


PIN = {"on": False}


def pin_worker(run: Path) -> None:
    """With --pin: move every thread of the run's training worker to CPU 0 (the app and the
    browsers stay on CPU 1), so the worker's speed shows what serving the pages costs it, not
    what sharing its cores with Chromium does (browsers run on the user's machine, not here)."""
    if not PIN["on"]:
        return
    pid = int(wait_for("the worker's pid", lambda: (run / "worker.pid").exists() and (run / "worker.pid").read_text().strip(), 120))
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {0})
        except OSError:
            pass


def click_start(page, run_root: Path, before: set[str]) -> Path:
    """Start from the form the page loaded from ui-config.json; the new run folder."""
    page_helpers.open_tab(page, "Training")  # tabs render their fields when first opened
    epochs = page_helpers.field(page, "f-epochs")
    wait_for("the page to load the config", lambda: epochs.input_value() == "100000", 120)
    page.locator("#start").click()
    run = wait_for("a new run folder", lambda: next((p for p in run_root.glob("*") if p.name not in before), None), 180)
    pin_worker(run)
    page_helpers.wait_text(page, "#run-status", r"training|sampling", timeout=600)
    return run


def read_dom_or_none(page) -> dict | None:
    """A DOM read during the window; None when the page's renderer is too busy to answer within
    a minute (its shared core is saturated): that read is skipped, the final check still counts."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        return read_dom(page)
    except PlaywrightTimeout:
        return None


def read_dom(page) -> dict:
    progress = page.locator("#run-progress").inner_text()
    step = re.search(r"step (\d+)/\d+", progress)
    captions = page.locator("#sample-gallery .caption-label").all_inner_texts()
    return {"status": page.locator("#run-status").inner_text().strip(), "step": int(step.group(1)) if step else None,
            "captions": [c.strip() for c in captions], "images": page.locator("#sample-gallery img").count()}


def caption(event: dict) -> str:
    return f"step {event.get('step')}: {event.get('prompt', '')}"


def stop_processes(app: subprocess.Popen, work: Path) -> None:
    app.terminate()
    try:
        app.wait(timeout=30)
    except subprocess.TimeoutExpired:
        app.kill()
    for pid_file in (work / "workspace").rglob("worker.pid"):  # a worker still training would be orphaned
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


# --- the benchmark -----------------------------------------------------------------------------
def baseline(browser_type, url: str, run_root: Path, minutes: float) -> tuple[Path, float, float]:
    browser = browser_type.launch(executable_path=CHROMIUM, args=browser_fixtures.CHROMIUM_ARGS + EXTRA_CHROMIUM_ARGS)
    run = click_start(open_page(browser, url, Polls()), run_root, set())
    browser.close()
    first = wait_for("the first training step", lambda: training_progress(read_events(run)), 900)
    t0 = max(first[0]["time"], time.time()) + WARMUP_S
    t1 = t0 + minutes * 60
    time.sleep(max(0.0, t1 - time.time()) + 1)
    from ot_gradio.runner.rundir import RunDir

    RunDir(run).request("stop")
    wait_for("the baseline run to end", lambda: (run / "exit_code").exists(), 600, pause=1)
    return run, t0, t1


def loaded(browser, url: str, run_root: Path, n: int, minutes: float, app: psutil.Process) -> dict:
    polls = [Polls() for _ in range(n)]
    before = {p.name for p in run_root.glob("*")}
    pages = [open_page(browser, url, polls[0])]
    run = click_start(pages[0], run_root, before)
    for i in range(1, n):
        pages.append(open_page(browser, url, polls[i]))
        page_helpers.wait_text(pages[i], "#run-progress", r"step \d+/\d+", timeout=300)
    t0 = time.time() + WARMUP_S
    pages[0].wait_for_timeout(WARMUP_S * 1000)
    t1 = t0 + minutes * 60
    cpu_groups = {"app": [app], "worker": app.children(recursive=True), "browsers": browser_procs(app)}
    cpu0 = {k: cpu_seconds(v) for k, v in cpu_groups.items()}
    seen: list[set[str]] = [set() for _ in range(n)]
    lags: list[list[int]] = [[] for _ in range(n)]
    skipped = [0] * n
    while time.time() < t1:
        for i, page in enumerate(pages):
            last = training_progress(read_events(run))
            dom = read_dom_or_none(page)
            if dom is None:
                skipped[i] += 1
                continue
            seen[i].update(dom["captions"])
            if dom["step"] is not None and last:
                lags[i].append(last[-1]["global_step"] - dom["step"])
        pages[0].wait_for_timeout(max(0.0, min(15.0, t1 - time.time())) * 1000)  # lets Playwright deliver request events
    cpu = {k: (cpu_seconds(v) - cpu0[k]) / (time.time() - t0) for k, v in cpu_groups.items()}

    window = training_progress(read_events(run))
    print(f"loaded window over: {len([e for e in window if t0 <= e['time'] <= t1])} steps in {t1 - t0:.0f} s", flush=True)
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        pages[0].locator("#stop").click(timeout=120_000)
    except PlaywrightTimeout:  # the renderer is starved; ask the worker as the Stop button's handler does
        print("the Stop click did not complete in 120 s (page too busy); stopping through the control folder", flush=True)
        from ot_gradio.runner.rundir import RunDir

        RunDir(run).request("stop")
    finals = []
    for i, page in enumerate(pages):
        page_helpers.wait_text(page, "#run-status", STOPPED, timeout=900)
        page.wait_for_timeout(3000)  # one more tick after the final status: the gallery and bar settle
        finals.append(read_dom(page))
        seen[i].update(finals[-1]["captions"])
    return {"run": run, "t0": t0, "t1": t1, "pages": pages, "polls": polls, "seen": seen, "lags": lags, "finals": finals, "cpu": cpu,
            "skipped": skipped}


def check_pages(result: dict) -> list[tuple[bool, str]]:
    events = read_events(result["run"])
    last_step = training_progress(events)[-1]["global_step"]
    statuses = [e["status"] for e in events if e["type"] == "status"]
    samples = [caption(e) for e in events if e["type"] == "sample"]
    expected = list(reversed(samples[-GALLERY_SHOWN:]))
    span = result["t1"] - result["t0"]
    out = []
    for i, dom in enumerate(result["finals"]):
        missing = [c for c in samples if c not in result["seen"][i]]
        problems = []
        if not statuses or statuses[-1] != "stopped" or not re.search(STOPPED, dom["status"]):
            problems.append(f"status {dom['status'][:40]!r} (events end with {statuses[-1:]})")
        if dom["step"] != last_step:
            problems.append(f"shows step {dom['step']}, events.jsonl ends at {last_step}")
        if dom["captions"] != expected:
            problems.append(f"gallery {len(dom['captions'])} captions / {dom['images']} images, expected the newest {len(expected)}")
        if missing:
            problems.append(f"{len(missing)} of {len(samples)} samples never shown: {missing[:3]}")
        polls = [t for t in result["polls"][i].sent if result["t0"] <= t <= result["t1"]]
        trips = [ms for t, ms in result["polls"][i].round_trip_ms if result["t0"] <= t <= result["t1"] and ms == ms]
        trip = f"round trip median {statistics.median(trips):.0f} ms max {max(trips):.0f} ms" if trips else "no round trips timed"
        lag = result["lags"][i]
        detail = (f"{len(polls) / span:.2f} polls/s ({trip}), lag behind events.jsonl median {statistics.median(lag) if lag else 'n/a'} "
                  f"max {max(lag) if lag else 'n/a'} steps over {len(lag)} reads; final step {dom['step']}/{last_step}, "
                  f"gallery {len(dom['captions'])}/{len(expected)} (of {len(samples)} samples), all samples seen: {not missing}; "
                  f"{result['skipped'][i]} DOM reads skipped (renderer busy)")
        out.append((not problems, detail + ("" if not problems else " -- " + "; ".join(problems))))
    return out


def spread(chunks: list[float]) -> str:
    if len(chunks) < 2:
        return f"{len(chunks)} chunk(s), no spread"
    return f"{len(chunks)} x {CHUNK_S:.0f} s chunks: {min(chunks):.3f}..{max(chunks):.3f}, CV {statistics.stdev(chunks) / statistics.mean(chunks):.1%}"


def report(args, sampler: Sampler, base: dict, load: dict, base_window, result: dict, checks) -> None:
    base_rows, load_rows = sampler.between(*base_window), sampler.between(result["t0"], result["t1"])
    app_mb = [r[1] for r in load_rows]
    head, tail = app_mb[: max(1, len(app_mb) // 5)], app_mb[-max(1, len(app_mb) // 5):]
    minutes = (load_rows[-1][0] - load_rows[0][0]) / 60 if len(load_rows) > 1 else 0
    ratio = load["rate"] / base["rate"]
    cvs = [statistics.stdev(c) / statistics.mean(c) for c in (base["chunks"], load["chunks"]) if len(c) >= 2]
    noise = max(cvs) if cvs else float("nan")
    print("\n===== browser load benchmark =====")
    print(f"setup: demo preset, {args.browsers} Chromium sessions x 1 poll/s, loaded window {args.minutes} min, "
          f"baseline {args.baseline_minutes} min, sample every {args.sample_seconds} s of training"
          + ("; worker pinned alone to CPU 0, app + browsers on CPU 1" if args.pin else "; no pinning"))
    print(f"steps/s  baseline {base['rate']:.3f} ({base['steps']} steps, median step {base['step_ms']:.0f} ms; {spread(base['chunks'])})")
    print(f"steps/s  loaded   {load['rate']:.3f} ({load['steps']} steps, median step {load['step_ms']:.0f} ms; {spread(load['chunks'])})")
    verdict = ("noise unknown: a window needs 2+ chunks" if noise != noise
               else "within noise" if abs(ratio - 1) <= 2 * noise else "OUTSIDE noise")
    print(f"ratio loaded/baseline {ratio:.3f} ({verdict}: |1 - ratio| vs 2 x the larger chunk CV = {2 * noise:.1%})")
    print(f"app RSS (python app.py alone, MB) baseline no pages: median {statistics.median([r[1] for r in base_rows]):.0f}; "
          f"loaded: min {min(app_mb):.0f} median {statistics.median(app_mb):.0f} max {max(app_mb):.0f} ({len(app_mb)} samples)")
    print(f"app RSS growth over the loaded window: first fifth median {statistics.median(head):.0f} -> last fifth median "
          f"{statistics.median(tail):.0f} MB ({statistics.median(tail) - statistics.median(head):+.0f} MB in {minutes:.1f} min); "
          f"measured bound: app RSS <= {max(app_mb):.0f} MB")
    print(f"worker RSS (training process, not the page) median {statistics.median([r[2] for r in load_rows]):.0f} MB")
    print("CPU during the loaded window (% of one core): " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in result["cpu"].items()))
    print(f"load average (1 min) baseline mean {statistics.mean([r[3] for r in base_rows]):.1f}, loaded mean "
          f"{statistics.mean([r[3] for r in load_rows]):.1f} on {os.cpu_count()} cores")
    for i, (ok, detail) in enumerate(checks):
        print(f"page {i + 1}: {'PASS' if ok else 'FAIL'} {detail}")
    print(f"no missed events: {'PASS' if all(ok for ok, _ in checks) else 'FAIL'}")


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="loaded window (default 10)")
    parser.add_argument("--browsers", type=int, default=5, help="browser sessions polling the run (default 5)")
    parser.add_argument("--baseline-minutes", type=float, default=2.0, help="window with no page open (default 2)")
    parser.add_argument("--sample-seconds", type=int, default=30, help="the run samples every N seconds of training (default 30)")
    parser.add_argument("--pin", action="store_true",
                        help="run the training worker alone on CPU 0 and the app + browsers on CPU 1, in both windows")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (app.log, runs) for inspection")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit("Chromium is not installed: apt-get install chromium (scripts/test.sh does)")
    from playwright.sync_api import sync_playwright

    if args.pin:
        if (os.cpu_count() or 1) < 2:
            raise SystemExit("--pin needs at least 2 CPUs")
        PIN["on"] = True
        os.sched_setaffinity(0, {1})  # inherited by the app and the browsers
    work = Path(tempfile.mkdtemp(prefix="ot-browser-load-"))
    write_config(work / "workspace", args.sample_seconds)
    app_proc, url = start_app(work)
    app = psutil.Process(app_proc.pid)
    sampler = Sampler(app)
    sampler.start()
    run_root = work / "workspace" / "demo" / "runs"
    print(f"work folder {work}; app pid {app.pid} at {url}", flush=True)
    try:
        with sync_playwright() as pw:
            base_run, b0, b1 = baseline(pw.chromium, url, run_root, args.baseline_minutes)
            base = window_rate(read_events(base_run), b0, b1)
            print(f"baseline done: {base['rate']:.3f} steps/s", flush=True)
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=browser_fixtures.CHROMIUM_ARGS + EXTRA_CHROMIUM_ARGS)
            result = loaded(browser, url, run_root, args.browsers, args.minutes, app)
            load = window_rate(read_events(result["run"]), result["t0"], result["t1"])
            checks = check_pages(result)
            browser.close()
        sampler.halt.set()
        report(args, sampler, base, load, (b0, b1), result, checks)
    finally:
        sampler.halt.set()
        stop_processes(app_proc, work)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
