"""The browser suite: the real page (python app.py) driven by Playwright in Debian's Chromium.

scripts/test.sh installs Chromium with apt; Playwright's own browser download is never used."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(cwd: Path, workspace: str, **extra_env: str):
    """app.py started in `cwd` with `--workspace workspace` (and `extra_env`); yields its URL once it serves."""
    port = _free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "OT_GRADIO_TINY_DIR": str(cwd / "tiny"), "PYTHONPATH": str(ROOT), **extra_env}
    log = open(cwd / "app.log", "wb")
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--workspace", workspace],
                            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=15)
            break
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("app.py did not serve the page in 300 s: " + (cwd / "app.log").read_text()[-2000:])
    assert proc.poll() is None, (cwd / "app.log").read_text()[-3000:]
    yield {"url": url, "cwd": cwd, "proc": proc, "workspace": (cwd / workspace).resolve()}
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    # a worker still training would be orphaned: stop every run's process group
    for pid_file in (cwd / workspace).rglob("worker.pid"):
        try:
            os.killpg(int(pid_file.read_text()), 9)
        except (OSError, ValueError):
            pass


@pytest.fixture
def app(tmp_path):
    """A fresh app.py in its own working folder and workspace; yields its URL."""
    yield from _launch(tmp_path, "workspace")


@pytest.fixture(scope="module")
def module_app(tmp_path_factory):
    """One app.py for a whole test module (each start costs ~20 s on a busy machine), started
    with a --workspace outside the folder it runs in."""
    cwd = tmp_path_factory.mktemp("app")
    yield from _launch(cwd, str(cwd / "elsewhere" / "ws"))


@pytest.fixture(scope="module")
def module_browser():
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Chromium is not installed: run scripts/test.sh (it installs Debian's chromium) or apt-get install chromium")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def module_page(module_browser, request):
    """A new tab of the module's browser (a fresh page session) at 1600x1000."""
    page = module_browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(60_000)
    yield page
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    page.close()


@pytest.fixture
def browser_page(request):
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Chromium is not installed: run scripts/test.sh (it installs Debian's chromium) or apt-get install chromium")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        yield page
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
        browser.close()


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"({e})"


def _page_state(page) -> str:
    out = []
    for elem_id in ("run-status", "problems", "queue-message"):
        try:
            loc = page.locator(f"#{elem_id}")
            out.append(f"#{elem_id}: {loc.first.inner_text(timeout=2000)!r}" if loc.count() else f"#{elem_id}: (not on the page)")
        except Exception as e:  # noqa: BLE001 - a report must not fail
            out.append(f"#{elem_id}: ({type(e).__name__})")
    try:
        out.append("toasts: " + " | ".join(page.locator(".toast-body").all_inner_texts()))
    except Exception as e:  # noqa: BLE001
        out.append(f"toasts: ({type(e).__name__})")
    return "\n".join(out)


def _app_state(app: dict) -> str:
    out = [f"--- app.log (tail)\n{_tail(app['cwd'] / 'app.log')}"]
    for run in sorted(Path(app["workspace"]).glob("*/runs/*")) + sorted(Path(app["workspace"]).glob("runs/*")):
        out.append(f"--- {run} exit_code={_tail(run / 'exit_code', 20).strip()!r}")
        out.append(f"log.txt (tail):\n{_tail(run / 'log.txt', 2000)}")
        out.append(f"events.jsonl (tail):\n{_tail(run / 'events.jsonl', 2000)}")
    return "\n".join(out)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that fails reports what the page and the app showed: the run's status,
    the problems, the toasts, app.log and each run's log, so a failure seen only in CI can be read."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    args = getattr(item, "funcargs", {})
    page = args.get("module_page") or args.get("browser_page")
    app = args.get("module_app") or args.get("app")
    text = []
    if page is not None:
        text.append(_page_state(page))
    if isinstance(app, dict) and "cwd" in app:
        text.append(_app_state(app))
    if text:
        report.sections.append(("what the page and the app showed", "\n".join(text)))
