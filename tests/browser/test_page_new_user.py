"""What broke for a new user, each tried in the page the way they tried it.

One app for the module (started with a --workspace outside the folder it runs in), one browser;
each test opens its own tab (a new page session). The tests run in file order: the run of
test_live_run is the "previous run" test_refused_start must not show."""

import json
import re
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from tests.browser.page_helpers import box, open_page, open_tab, type_into, wait_for

pytestmark = pytest.mark.browser


def ui_config(app):
    path = app["workspace"] / "ui-config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def toasts(page):
    return " | ".join(page.locator(".toast-body").all_inner_texts())


def test_add_a_concept_then_use_its_folder(module_app, module_page, tmp_path):
    """Add keeps the tab working and what is typed afterwards is kept; the folder
    just typed is where Browse opens, and the tools accept it without a restart."""
    page = module_page
    images = module_app["cwd"] / f"my-cats-{tmp_path.name}"  # in the app's start folder, outside its workspace
    images.mkdir()  # (a folder outside every root is trained on, never browsed: tests/ui/test_security_paths.py)
    for name, colour in (("a.png", "red"), ("b.png", "blue")):
        Image.new("RGB", (32, 32), colour).save(images / name)
    open_page(page, module_app["url"])
    open_tab(page, "Concepts")
    page.locator("#concept-add").click()
    selector = box(page, "concept-select")
    wait_for(lambda: selector.input_value() == "2. concept 2", "the new concept to be selected")
    page.wait_for_timeout(1000)
    assert "not in the list of choices" not in toasts(page)
    assert page.locator("#tab-concepts .error").count() == 0  # no red "Error" badge on the fields

    type_into(page, "concept-concepts-name", "my cats")
    type_into(page, "concept-concepts-path", str(images))
    wait_for(lambda: [c.get("path") for c in ui_config(module_app).get("concepts", [])][-1:] == [str(images)],
             "the typed folder to reach the config")
    assert [c["name"] for c in ui_config(module_app)["concepts"]] == ["demo", "my cats"]

    # Browse opens at the field's folder, listing its images (no restart)
    page.locator("#concept-concepts-path-browse").click()
    page.locator("#browser.open").wait_for()
    wait_for(lambda: box(page, "browse-folder").input_value() == str(images.resolve()), "the browser to open at the folder")
    assert "Refused" not in page.locator("#browse-message").inner_text()
    page.locator("#browse-close").click()

    # the caption tool opens the same folder
    open_tab(page, "Tools")
    open_tab(page, "Captions")
    type_into(page, "captions-folder", str(images))
    page.locator("#captions-open").click()
    wait_for(lambda: box(page, "captions-current").input_value() == "a.png", "the caption tool to show a.png")
    assert "outside the folders" not in toasts(page)

    # Remove goes back to one concept, the selector stays valid
    open_tab(page, "Concepts")
    page.locator("#concept-remove").click()
    wait_for(lambda: selector.input_value() == "1. demo", "the demo concept to be selected")
    wait_for(lambda: len(ui_config(module_app)["concepts"]) == 1, "the concept to be removed")


def test_upload_images_from_this_computer_into_a_concept(module_app, module_page, tmp_path):
    """A share link's user has the images on their laptop: Upload images sends them (and a .zip)
    into the workspace's datasets folder, which becomes the concept's folder on the form and in
    the config, and its statistics are shown."""
    page = module_page
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    Image.new("RGB", (32, 32), "red").save(laptop / "a.png")
    (laptop / "a.txt").write_text("a red square")
    with zipfile.ZipFile(laptop / "more.zip", "w") as archive:
        for name, colour in (("b.png", "green"), ("c.png", "blue")):
            image = laptop / name
            Image.new("RGB", (32, 32), colour).save(image)
            archive.write(image, f"more/{name}")
    open_page(page, module_app["url"])
    open_tab(page, "Concepts")
    page.locator("#concept-add").click()
    selector = box(page, "concept-select")
    wait_for(lambda: selector.input_value() == "2. concept 2", "the new concept to be selected")
    page.locator("#concept-upload").locator("xpath=..").locator("input[type=file]").set_input_files(
        [str(laptop / "a.png"), str(laptop / "a.txt"), str(laptop / "more.zip")])
    folder = (module_app["workspace"] / "datasets" / "concept_2").resolve()
    wait_for(lambda: [c.get("path") for c in ui_config(module_app).get("concepts", [])][-1:] == [str(folder)],
             "the uploaded folder to become the concept's")
    assert sorted(p.name for p in folder.iterdir()) == ["a.png", "a.txt", "b.png", "c.png"]
    wait_for(lambda: box(page, "concept-concepts-path").input_value() == str(folder), "the form to show the folder")
    wait_for(lambda: "Added to datasets/concept_2: 3 images, 1 caption." in page.locator("#concept-upload-note").inner_text(),
             "the upload's note")
    wait_for(lambda: "3" in page.locator("#tab-concepts").inner_text() and "Cannot read" not in page.locator("#tab-concepts").inner_text(),
             "the statistics of the uploaded images")
    assert page.locator("#tab-concepts .error").count() == 0
    page.wait_for_timeout(1500)  # the folder field's own change event reaches the server and keeps the folder
    assert ui_config(module_app)["concepts"][-1]["path"] == str(folder)
    page.locator("#concept-remove").click()  # the next tests train the config's concepts
    wait_for(lambda: len(ui_config(module_app)["concepts"]) == 1, "the concept to be removed")


def axis_labels(page, elem_id):
    return page.locator(f"#{elem_id} [aria-roledescription=axis]").evaluate_all("es => es.map(e => e.getAttribute('aria-label'))")


def line_points(page, elem_id):
    """Points of each line drawn in a chart (vega draws a line as one path: M x,y L x,y ...)."""
    paths = page.locator(f"#{elem_id} .mark-line path").evaluate_all("es => es.map(e => e.getAttribute('d') || '')")
    return [len(re.findall(r"[ML]", d)) for d in paths]


def test_live_run_in_the_workspace_with_a_chart_that_draws(module_app, module_page):
    """In a page opened before the run, the loss chart has numeric axes and
    draws lines; the run lands in --workspace, which the General tab shows; samples are shown at
    their size; the charts are not redrawn while nothing changes."""
    page = module_page
    workspace = module_app["workspace"]
    open_page(page, module_app["url"])
    open_tab(page, "General")
    wait_for(lambda: box(page, "f-workspace_dir").input_value() == str(workspace / "demo"), "the workspace in the General tab")
    open_tab(page, "Sampling")
    type_into(page, "f-sample_after", "1")  # a sample after each epoch
    open_tab(page, "Training")
    type_into(page, "f-epochs", "2")
    wait_for(lambda: ui_config(module_app).get("epochs") == 2 and ui_config(module_app).get("sample_after") == 1, "the edits to be saved")
    # the page's own filling-in of the form saved nothing else (it once saved the built-in
    # defaults over the demo preset: FINE_TUNE, cuda, 3e-06, batch size 1...)
    kept = {"training_method": "LORA", "train_device": "cpu", "output_model_format": "KOHYA_LORA", "batch_size": 2,
            "learning_rate": 0.001, "backup_after": 0, "sample_after_unit": "EPOCH", "resolution": "64"}
    assert {k: ui_config(module_app).get(k) for k in kept} == kept

    page.locator("#start").click()
    open_tab(page, "Run")  # the charts, samples and status live on the Run tab
    wait_for(lambda: list((workspace / "demo" / "runs").glob("*/config.json")), "the run to start")
    (run,) = (workspace / "demo" / "runs").iterdir()  # in --workspace, not in the folder the app was started in
    assert {k: json.loads((run / "config.json").read_text()).get(k) for k in kept} == kept
    wait_for(lambda: sum(line_points(page, "loss-plot")) >= 4, "the loss chart to draw two lines of two points", timeout=300)
    x_axis, y_axis = axis_labels(page, "loss-plot")
    assert "X-axis titled 'step' for a linear scale" in x_axis, x_axis
    assert "Y-axis titled 'loss' for a linear scale" in y_axis, y_axis

    assert not (module_app["cwd"] / "workspace").exists()

    # a 64 px sample is shown at 64 px, captioned with its step and prompt
    image = page.locator("#sample-gallery img").first
    image.wait_for(timeout=300_000)
    size = image.evaluate("e => [e.naturalWidth, e.getBoundingClientRect().width]")
    assert size[0] == 64 and abs(size[1] - 64) < 2, size
    assert re.search(r"step \d+: a red circle", page.locator("#sample-gallery").inner_text())

    # while nothing changes the chart is not drawn again each poll (the same svg stays)
    page.locator("#stop").click()
    wait_for(lambda: re.search(r"stopped|done", page.locator("#run-status").inner_text()), "the run to end", timeout=300)
    # the ended run's model: its place on this machine and a download (a share link's user has no other way to it)
    wait_for(lambda: page.locator("#run-download").is_visible(), "the model's download on the Run tab")
    assert page.locator("#run-download").inner_text().startswith("Download demo-lora.safetensors (")
    assert f"saved: {workspace / 'demo'}" in page.locator("#run-status").inner_text()
    page.wait_for_timeout(3000)
    page.locator("#loss-plot svg").first.evaluate("e => { e.dataset.marked = '1' }")
    page.wait_for_timeout(3500)
    assert page.locator("#loss-plot svg[data-marked='1']").count() == 1
    assert page.locator("#loss-plot [data-testid=status-tracker]:not(.hide)").count() == 0


def test_refused_start_names_every_field_and_shows_no_old_run(module_app, module_page):
    """Batch size 0 and a missing concept folder are both listed by field, no
    nameless toast; the previous run's numbers are not left under the problems."""
    page = module_page
    open_page(page, module_app["url"])
    open_tab(page, "Run")
    wait_for(lambda: re.search(r"stopped|done", page.locator("#run-status").inner_text()), "the previous run to be shown")
    open_tab(page, "Training")
    type_into(page, "f-batch_size", "0")
    open_tab(page, "Concepts")
    type_into(page, "concept-concepts-path", str(Path(module_app["cwd"]) / "no-such-folder"))
    page.wait_for_timeout(1500)
    page.locator("#start").click()
    wait_for(lambda: "Concept 1 'demo' → Folder" in page.locator("#problems").inner_text(), "the problems to be listed")
    problems = page.locator("#problems").inner_text()
    assert "Training → Batch size: must be >= 1" in problems and "no-such-folder" in problems, problems
    assert "minimum value" not in toasts(page)
    wait_for(lambda: "Nothing started" in page.locator("#run-bar-status").inner_text(), "the run bar to say nothing started")
    open_tab(page, "Run")
    wait_for(lambda: "Nothing started" in page.locator("#run-status").inner_text(), "the Run tab to say nothing started")
    status = page.locator("#run-status").inner_text()
    assert not re.search(r"stopped|loss \d", status), status
    assert sum(line_points(page, "loss-plot")) == 0
    assert len(list((module_app["workspace"] / "demo" / "runs").iterdir())) == 1
