"""The queue, the Runs tab and validation in the page: a queue of two demo runs that goes on across an app restart,
the Runs tab listing and comparing them, and a VALIDATION concept drawing a validation-loss curve
on the Run tab.

One workspace for the module, two app processes on it (the first is stopped mid-queue), one
browser. The tests run in file order and share the two runs: test_runs_tab_lists_and_compares and
test_validation_curve_on_the_run_tab read what test_queue_survives_an_app_restart produced. Both
runs are the demo preset shrunk through the page's own fields: one epoch of a few 64 px steps."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser.page_helpers import box, open_page, open_tab, type_into, wait_for, wait_for_preset

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


# --- the app, startable twice on one workspace ------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(cwd: Path, workspace: Path) -> dict:
    port = _free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "OT_GRADIO_TINY_DIR": str(cwd / "tiny"), "PYTHONPATH": str(ROOT)}
    log = open(cwd / f"app-{port}.log", "wb")
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--workspace", str(workspace)],
                            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(url, timeout=15)
            return {"url": url, "proc": proc, "log": cwd / f"app-{port}.log"}
        except OSError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail("app.py did not serve the page: " + (cwd / f"app-{port}.log").read_text()[-2000:])


def stop_app(app: dict) -> None:
    """Stops the page's process only (SIGTERM, as a service manager does); a worker training in
    its own process group goes on."""
    app["proc"].terminate()
    try:
        app["proc"].wait(timeout=30)
    except subprocess.TimeoutExpired:
        app["proc"].kill()
        app["proc"].wait()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("queue-app")
    workspace = cwd / "ws"
    state = {"cwd": cwd, "workspace": workspace, "app": start_app(cwd, workspace)}
    yield state
    stop_app(state["app"])
    for pid_file in workspace.rglob("worker.pid"):  # nothing left training after the module
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.fixture
def page(module_browser, request):
    page = module_browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(60_000)
    yield page
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    page.close()


# --- page helpers ---------------------------------------------------------------------------------------
def choose(page, elem_id, value):
    field = box(page, elem_id)
    field.click()
    field.fill(value)
    page.get_by_role("option", name=value, exact=True).first.click()
    page.keyboard.press("Escape")


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def queue_entries(shared) -> list[dict]:
    return read_json(shared["workspace"] / "queue.json").get("entries", [])


def events(run_dir: str) -> list[dict]:
    path = Path(run_dir) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def line_points(page, elem_id):
    """Points of each line a chart draws (vega draws a line as one path: M x,y L x,y ...)."""
    paths = page.locator(f"#{elem_id} .mark-line path").evaluate_all("es => es.map(e => e.getAttribute('d') || '')")
    return [len(re.findall(r"[ML]", d)) for d in paths]


def legend(page, elem_id):
    """The series named in a chart's legend (svg text: textContent, it has no innerText)."""
    return page.locator(f"#{elem_id} .role-legend-label text").evaluate_all("es => es.map(e => e.textContent)")


# --- the tests ------------------------------------------------------------------------------------------
def test_queue_survives_an_app_restart(shared, page):
    """Two demo runs queued from the page run one after the other although the app is stopped
    while the first runs and started again on the same workspace."""
    held = shared["cwd"] / "held-out"  # two images the second run validates on, never trained
    from ot_gradio.data.demo import ensure_demo_dataset

    shapes = ensure_demo_dataset(shared["cwd"] / "shapes")
    held.mkdir()
    for image in sorted(shapes.glob("*.png"))[:2]:
        for f in (image, image.with_suffix(".txt")):
            (held / f.name).write_bytes(f.read_bytes())
    open_page(page, shared["app"]["url"])
    choose(page, "preset", "demo")
    wait_for_preset(page, shared["workspace"])
    workspace_dir = box(page, "f-workspace_dir")  # the demo lands in <workspace>/demo
    # a held-out concept in both runs (a VALIDATION concept is never trained; it is read only with Validation on)
    open_tab(page, "Concepts")
    page.locator("#concept-add").click()
    wait_for(lambda: box(page, "concept-select").input_value().startswith("2."), "the new concept to be selected")
    type_into(page, "concept-concepts-name", "held out")
    type_into(page, "concept-concepts-path", str(held))
    choose(page, "concept-concepts-type", "VALIDATION")
    # run 1: one epoch of one step (6 square images, batches of 4; the rest fall out of full batches)
    open_tab(page, "Training")
    type_into(page, "f-epochs", "1")
    type_into(page, "f-batch_size", "4")
    open_tab(page, "General")
    assert workspace_dir.input_value() == str(shared["workspace"].resolve() / "demo")
    ui = shared["workspace"] / "ui-config.json"
    wait_for(lambda: read_json(ui).get("batch_size") == 4 and read_json(ui).get("epochs") == 1
             and [c.get("type") for c in read_json(ui).get("concepts", [])] == ["STANDARD", "VALIDATION"], "the edits to be saved")

    # run 2, set up in a second tab (it opens with the saved config): validation every step and
    # batches of 3 (two steps: the 6 square images; the wide and tall pairs fall out). Both are
    # queued a moment apart, so the first is surely still running when the app is stopped.
    second = page.context.browser.new_page(viewport={"width": 1600, "height": 1000})
    second.set_default_timeout(60_000)
    try:
        open_page(second, shared["app"]["url"])
        open_tab(second, "General")
        wait_for(lambda: box(second, "f-workspace_dir").input_value().endswith("demo"), "the second tab")
        second.locator("#f-validation input[type=checkbox]").check()
        choose(second, "f-validate_after_unit", "STEP")
        open_tab(second, "Training")
        wait_for(lambda: box(second, "f-batch_size").input_value() == "4", "the second tab to show the saved config")
        type_into(second, "f-batch_size", "3")
        wait_for(lambda: read_json(ui).get("batch_size") == 3 and read_json(ui).get("validation") is True
                 and read_json(ui).get("validate_after_unit") == "STEP", "the second run's edits to be saved")
        page.locator("#queue-add").click()
        wait_for(lambda: len(queue_entries(shared)) == 1, "the first entry to be queued")
        second.locator("#queue-add").click()
        wait_for(lambda: len(queue_entries(shared)) == 2, "the second entry to be queued")
        # the run bar shows the queue's length
        wait_for(lambda: second.locator("#queue-length").inner_text().strip() == "Queue: 1 waiting", "the run bar to show 1 waiting")
    finally:
        second.screenshot(path=str(ARTIFACTS / "queue-second-tab.png"))
        second.close()
    configs = [e["config"] for e in queue_entries(shared)]
    assert [(c["batch_size"], c["validation"]) for c in configs] == [(4, False), (3, True)], configs

    # the app stops while the first run is running and the second waits; the first run's worker goes on
    entries = queue_entries(shared)
    assert [e["state"] for e in entries] == ["running", "waiting"], entries
    first_run = entries[0]["run_dir"]
    assert Path(first_run).parent == shared["workspace"].resolve() / "demo" / "runs"
    stop_app(shared["app"])
    assert [e["state"] for e in queue_entries(shared)] == ["running", "waiting"]

    shared["app"] = start_app(shared["cwd"], shared["workspace"])
    open_page(page, shared["app"]["url"])
    page.wait_for_selector("#queue-length")
    # the restarted page follows the queue's runs in its run bar (the first, still running or just done)
    bar = page.locator("#run-bar-status")
    wait_for(lambda: re.search(r"starting|caching|training|saving|done", bar.inner_text()), "the run bar to show the queued run", timeout=120)
    wait_for(lambda: not {e["state"] for e in queue_entries(shared)} & {"waiting", "running"}, "both queued runs to end", timeout=600)
    entries = queue_entries(shared)
    assert [e["state"] for e in entries] == ["done", "done"], (entries, shared["app"]["log"].read_text()[-2000:])
    assert entries[0]["run_dir"] == first_run and entries[1]["run_dir"] != first_run
    one, two = events(entries[0]["run_dir"]), events(entries[1]["run_dir"])
    assert one[-1]["type"] == "status" and one[-1]["status"] == "done"
    assert two[-1]["type"] == "status" and two[-1]["status"] == "done"
    assert one[-1]["time"] <= two[0]["time"], "the second run started before the first ended"
    runs = sorted(p.name for p in (shared["workspace"] / "demo" / "runs").iterdir())
    assert runs == sorted(Path(e["run_dir"]).name for e in entries)
    shared["runs"] = [Path(e["run_dir"]).name for e in entries]

    # the queue's table on the Run tab says so, in order, and the bar says the queue is empty
    open_tab(page, "Run")
    page.locator("#queue-panel").get_by_text("Queue", exact=True).first.click()
    table = page.locator("#queue-table")
    wait_for(lambda: len(re.findall(r"\bdone\b", table.inner_text())) == 2, "the queue table to show both done", timeout=30)
    text = table.inner_text()
    assert text.index(shared["runs"][0]) < text.index(shared["runs"][1])
    wait_for(lambda: page.locator("#queue-length").inner_text().strip() == "Queue: empty", "the run bar to show an empty queue")


def test_runs_tab_lists_and_compares_the_two_runs(shared, page):
    runs = shared.get("runs")
    assert runs, "needs the runs of test_queue_survives_an_app_restart"
    open_page(page, shared["app"]["url"])
    page.wait_for_selector("#queue-length")
    open_tab(page, "Runs")  # opening the tab lists the runs
    table = page.locator("#runs-table")
    wait_for(lambda: all(r in table.inner_text() for r in runs), "both runs in the list")
    text = table.inner_text()
    assert text.index(runs[1]) < text.index(runs[0]), "newest first"
    assert len(re.findall(r"\bdone\b", text)) == 2
    for name in runs:
        box(page, "runs-selected").click()
        page.get_by_role("option", name=name, exact=True).first.click()
    page.keyboard.press("Escape")
    page.locator("#runs-compare").click()
    # overlaid loss: one line per run (the second run's validation loss as a third), drawn
    wait_for(lambda: len([n for n in line_points(page, "runs-compare-plot") if n >= 1]) >= 3, "the compared loss lines")
    labels = legend(page, "runs-compare-plot")
    # (the legend shortens a long label with an ellipsis: "<run> (valid…")
    assert runs[0] in labels and runs[1] in labels and any(label.startswith(f"{runs[1]} (valid") for label in labels), labels
    differing = page.locator("#runs-differing")
    wait_for(lambda: "batch_size" in differing.inner_text(), "the differing fields")
    fields = differing.inner_text()
    assert "validation" in fields and "validate_after_unit" in fields, fields
    assert "learning_rate" not in fields and "epochs" not in fields  # the same in both: not listed
    page.locator("#runs-differing").scroll_into_view_if_needed()


def test_validation_concept_draws_a_validation_curve_on_the_run_tab(shared, page):
    runs = shared.get("runs")
    assert runs, "needs the runs of test_queue_survives_an_app_restart"
    validation = [e for e in events(str(shared["workspace"] / "demo" / "runs" / runs[1])) if e.get("type") == "validation"]
    steps = [e["global_step"] for e in validation]
    assert len(steps) >= 2 and steps == sorted(steps), validation  # every step of the second run
    open_page(page, shared["app"]["url"])
    open_tab(page, "Run")  # shows the workspace's last run: the second
    wait_for(lambda: "validation" in legend(page, "loss-plot"), "the validation series in the loss chart")
    assert set(legend(page, "loss-plot")) == {"loss", "smoothed", "validation"}
    # three lines drawn (loss, smoothed, validation), each a point per step: validation ran every step
    wait_for(lambda: line_points(page, "loss-plot") == [len(steps)] * 3, f"three lines of {len(steps)} points")
