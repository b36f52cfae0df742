"""What open pages show of runs they did not start: a run the queue started, events written after
the page drew its charts or was reloaded, a failed run's reason, queued runs' output files.

Runs here are stand-ins written by the test (events, log, a process whose command line names the
run folder, as the worker's does), so the page's side is tested in seconds, without training; the
queue itself starting real runs is test_page_queue_runs.py's. One app for the module."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from ot_gradio.runner.rundir import EventWriter, create_run
from tests.browser.page_helpers import box, open_page, open_tab, type_into, wait_for

pytestmark = pytest.mark.browser


def legend(page):
    return page.locator("#loss-plot .role-legend-label text").evaluate_all("es => es.map(e => e.textContent)")


def line_points(page):
    """Points of each line drawn (vega draws a line as one path: M x,y L x,y ...)."""
    paths = page.locator("#loss-plot .mark-line path").evaluate_all("es => es.map(e => e.getAttribute('d') || '')")
    return [len(re.findall(r"[ML]", d)) for d in paths]


def bar(page):
    return page.locator("#run-bar-status").inner_text()


@pytest.fixture(scope="module")
def standins():
    """The stand-in workers; set up before the app, so ended after it (the app's queue never
    starts a real run when the last one goes)."""
    procs = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def runs_folder(app) -> Path:
    return app["workspace"] / "demo"  # the demo preset's workspace_dir, under --workspace


def fake_run(app, standins, *, alive: bool, events=(), log="", **config) -> tuple:
    run = create_run(runs_folder(app), {"output_model_destination": str(runs_folder(app) / "models" / "demo-lora.safetensors"), **config})
    writer = EventWriter(run)
    for kind, payload in events:
        writer.emit(kind, **payload)
    if log:
        run.log.write_text(log)
    if alive:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)", str(run.path.resolve())], start_new_session=True)
        run.pid_file.write_text(str(proc.pid))
        standins.append(proc)
    else:
        run.exit_file.write_text("0")
    return run, writer


def training(step, total):
    return ("progress", {"phase": "training", "epoch": 1, "epochs": 1, "step": step, "steps_per_epoch": total,
                         "global_step": step, "total_steps": total, "it_s": 1.0, "eta_s": float(total - step)})


def end(standins, writer, status):
    writer.status(status)
    proc = standins.pop()
    proc.kill()
    proc.wait()


def test_open_pages_follow_a_run_they_did_not_start(standins, module_app, module_browser):
    """A page showing a stopped run follows the run the queue starts next, on every tab."""
    stopped, _ = fake_run(module_app, standins, alive=False, events=[
        ("status", {"status": "training"}), training(34, 60), ("metrics", {"global_step": 34, "loss": 0.3}),
        ("status", {"status": "stopped"})])
    pages = [module_browser.new_page(viewport={"width": 390, "height": 844})]  # a phone, on the first tab
    try:
        for page in pages:
            page.set_default_timeout(60_000)
            open_page(page, module_app["url"])
        for page in pages:
            wait_for(lambda p=page: "stopped" in bar(p), "the pages to show the stopped run")
        queued, writer = fake_run(module_app, standins, alive=True, events=[("status", {"status": "training"}), training(4, 12)])
        for page in pages:
            wait_for(lambda p=page: re.search(r"training · step 4/12", bar(p)), "every open page to follow the new run", timeout=30)
        end(standins, writer, "done")
        for page in pages:
            wait_for(lambda p=page: "done" in bar(p), "the pages to show it ended")
        assert str(stopped.path) != str(queued.path)
    finally:
        for page in pages:
            page.close()


def test_every_event_reaches_every_open_page_after_a_reload_too(standins, module_app, module_browser):
    """A validation point and a sample written after a page drew its chart, or while it
    was being reloaded, reach all of them."""
    run, writer = fake_run(module_app, standins, alive=True, validation=True, events=[
        ("status", {"status": "training"}), training(1, 4), ("metrics", {"global_step": 1, "loss": 0.5})])
    pages = [module_browser.new_page(viewport={"width": 1600, "height": 1000}) for _ in range(2)]
    try:
        for page in pages:
            page.set_default_timeout(60_000)
            open_page(page, module_app["url"])
            open_tab(page, "Run")
        for page in pages:
            wait_for(lambda p=page: "smoothed" in legend(p), "the loss chart to be drawn")
        writer.emit("metrics", global_step=2, loss=0.45)
        writer.emit("validation", global_step=2, loss=0.47)
        pages[1].reload()  # mid-run, before the first validation was drawn
        open_tab(pages[1], "Run")
        image = run.samples / "step000002-epoch1-0.png"
        Image.new("RGB", (64, 64), "red").save(image)
        writer.emit("sample", path=str(image), prompt="a red circle", step=2, epoch=1, index=0)
        writer.emit("metrics", global_step=3, loss=0.4)
        writer.emit("validation", global_step=3, loss=0.42)
        for i, page in enumerate(pages):
            wait_for(lambda p=page: sorted(line_points(p)) == [2, 3, 3], f"page {i + 1}'s chart to draw the validation loss", timeout=30)
            assert set(legend(page)) == {"loss", "smoothed", "validation"}
            ticks = page.locator('#loss-plot g.role-axis[aria-label^="X-axis"] .role-axis-label text').evaluate_all("es => es.map(e => e.textContent)")
            assert ticks and all(t.replace(",", "").isdigit() for t in ticks), ticks  # whole steps (3 steps were ticked 1.0, 1.5...)
            wait_for(lambda p=page: p.locator("#sample-gallery img").count() == 1, f"page {i + 1}'s gallery to show the sample", timeout=30)
            assert "a red circle" in page.locator("#sample-gallery").inner_text()
        end(standins, writer, "done")
    finally:
        for page in pages:
            page.close()


def test_a_failed_run_says_why_in_the_bar_and_start_refuses_an_empty_folder(standins, module_app, module_page, tmp_path):
    """The bar says the reason in one line, the traceback only behind Details; and Start
    refuses an empty concept folder by field, as `validate` and `train` do."""
    page = module_page
    reason = "Concept 'demo': no images (png, jpg, webp) in folder '/data/cats'"
    fake_run(module_app, standins, alive=False, events=[("status", {"status": "error", "message": reason})],
             log="Traceback (most recent call last):\n  File \"prepare.py\", line 70\nDataError: " + reason + "\n")
    open_page(page, module_app["url"])
    wait_for(lambda: "no images" in bar(page), "the bar to say why the run failed")
    assert "error" in bar(page) and "Traceback" not in bar(page)
    open_tab(page, "Run")
    assert "Traceback" not in page.locator("#run-status").inner_text()
    assert not page.locator("#log-tail textarea").is_visible()  # folded under Details
    page.locator("#run-details").get_by_text("Details", exact=False).first.click()
    wait_for(lambda: "Traceback" in box(page, "log-tail").input_value(), "the traceback under Details")

    empty = tmp_path / "my-cats"
    empty.mkdir()
    (empty / "cat.txt").write_text("a caption whose image is missing")
    open_tab(page, "Concepts")
    type_into(page, "concept-concepts-path", str(empty))
    page.wait_for_timeout(1500)
    runs = len(list((runs_folder(module_app) / "runs").iterdir()))
    page.locator("#start").click()
    wait_for(lambda: "has no images" in page.locator("#problems").inner_text(), "Start to refuse the empty folder")
    assert "Concepts → Concept 1 'demo' → Folder" in page.locator("#problems").inner_text()
    assert len(list((runs_folder(module_app) / "runs").iterdir())) == runs  # nothing started


def test_queued_runs_never_share_an_output_file(standins, module_app, module_page):
    """With the demo's output already written, two runs queued from the page get their
    own numbered files, shown in the queue and its message."""
    page = module_page
    models = runs_folder(module_app) / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / "demo-lora.safetensors").write_bytes(b"an earlier run's model")
    _, writer = fake_run(module_app, standins, alive=True, events=[("status", {"status": "training"}), training(1, 9)])  # the queue waits
    open_page(page, module_app["url"])
    open_tab(page, "Concepts")  # the last test left an empty folder in the saved config: the demo's again
    type_into(page, "concept-concepts-path", str(module_app["workspace"] / "demo-data" / "shapes"))
    page.wait_for_timeout(1500)
    open_tab(page, "Run")  # the queue's message and table
    page.locator("#queue-panel").get_by_text("Queue", exact=True).first.click()
    for n in (2, 3):
        page.locator("#queue-add").click()
        wait_for(lambda n=n: f"demo-lora-{n}.safetensors instead" in page.locator("#queue-message").inner_text(), f"entry {n - 1} to be queued")
    entries = json.loads((module_app["workspace"] / "queue.json").read_text())["entries"]
    assert [Path(e["config"]["output_model_destination"]).name for e in entries] == ["demo-lora-2.safetensors", "demo-lora-3.safetensors"]
    wait_for(lambda: "demo-lora-3.safetensors" in page.locator("#queue-table").inner_text(), "the queue table to show the files")
    assert (models / "demo-lora.safetensors").read_bytes() == b"an earlier run's model"
    # the stand-in runs on until the app has stopped (standins ends after module_app): nothing is trained
    writer.emit("metrics", global_step=1, loss=0.5)
