"""A new user's path through the page: the demo preset trained from the browser alone."""

import json
import re
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser.page_helpers import open_page, wait_for_preset

pytestmark = pytest.mark.browser


def field(page, elem_id):
    return page.locator(f"#{elem_id} textarea, #{elem_id} input").first


def choose(page, elem_id, value):
    box = page.locator(f"#{elem_id} input").first
    box.click()
    box.fill(value)
    page.get_by_role("option", name=value, exact=True).first.click()


def open_tab(page, name):
    page.get_by_role("tab", name=name, exact=True).click()


def wait_text(page, selector, pattern, timeout=120):
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = page.locator(selector).inner_text()
        if re.search(pattern, text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"{selector} never matched {pattern!r}; last text: {text[-500:]}")


def test_demo_lora_from_the_page(app, browser_page):
    page = browser_page
    open_page(page, app["url"])
    choose(page, "preset", "demo")
    wait_for_preset(page, app["workspace"])
    open_tab(page, "General")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        tb_port = s.getsockname()[1]
    port = field(page, "f-tensorboard_port")
    port.fill(str(tb_port))
    port.press("Tab")
    open_tab(page, "Training")
    epochs = field(page, "f-epochs")
    epochs.fill("200")
    epochs.press("Tab")
    page.wait_for_timeout(1000)

    page.locator("#start").click()
    open_tab(page, "Run")  # status, charts and samples are on the Run tab
    wait_text(page, "#run-status", r"training", timeout=180)
    wait_text(page, "#run-progress", r"step \d+/\d+")
    page.locator("#loss-plot canvas, #loss-plot svg").first.wait_for(timeout=60_000)

    # TensorBoard runs on the run's logs, on the port set in the page, linked on the Run tab
    wait_text(page, "#tensorboard-link", rf"127\.0\.0\.1:{tb_port}", timeout=60)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{tb_port}/", timeout=5)
            break
        except OSError:
            time.sleep(1)
    else:
        raise AssertionError("TensorBoard never answered")

    # a sample image arrives: asked for now (the demo's own, every 5 epochs, is 25 steps away: on a
    # busy 2-core machine at 20-45 s a step that was more than the wait)
    page.locator("#sample-now").click()
    page.locator("#sample-gallery img").first.wait_for(timeout=300_000)

    # reload mid-run: the page reattaches to the running training
    page.reload()
    open_tab(page, "Run")
    wait_text(page, "#run-status", r"training|sampling", timeout=60)
    wait_text(page, "#run-progress", r"step \d+/\d+")

    page.locator("#stop").click()
    wait_text(page, "#run-status", r"stopped", timeout=180)
    runs = list((app["cwd"] / "workspace" / "demo" / "runs").iterdir())
    assert len(runs) == 1
    assert any((runs[0] / "backup").iterdir())
    assert (app["cwd"] / "workspace" / "demo" / "models" / "demo-lora.safetensors").exists()


def test_bad_values_are_named_and_nothing_starts(app, browser_page):
    page = browser_page
    open_page(page, app["url"])
    choose(page, "preset", "demo")
    wait_for_preset(page, app["workspace"])
    open_tab(page, "Training")
    lr = field(page, "f-learning_rate")
    assert lr.input_value() == "0.001"
    lr.fill("abc")
    lr.press("Tab")
    page.wait_for_timeout(1000)
    page.locator("#start").click()
    wait_text(page, "#problems", r"Training → Learning rate", timeout=60)

    lr.fill("0.001")
    lr.press("Tab")
    open_tab(page, "Concepts")
    path = field(page, "concept-concepts-path")
    missing = str(Path(app["cwd"]) / "no-such-folder")
    path.fill(missing)
    path.press("Tab")
    # Start at once, as a user does: it runs in turn with the edit's save (an edit saved while
    # Start read its inputs once started a run on the previous folder)
    page.locator("#start").click()
    wait_text(page, "#problems", r"Concept 1 .* → Folder", timeout=60)
    assert not (app["cwd"] / "workspace" / "demo" / "runs").exists()


def pick_entry(page, elem_id, label):
    page.locator(f"#{elem_id} input").first.click()
    page.get_by_role("option", name=label, exact=True).first.click()


def test_guide_file_browser_and_fields_by_model_type(app, browser_page):
    page = browser_page
    cwd = Path(app["cwd"]).resolve()
    (cwd / "my-images" / "cats").mkdir(parents=True)
    open_page(page, app["url"])

    # the guide's Concepts step opens the Concepts tab
    page.locator("#guide-step-4").click()
    page.locator("#concept-add").wait_for(state="visible")
    assert page.get_by_role("tab", name="Concepts", exact=True).get_attribute("aria-selected") == "true"

    # browse to a folder under the app's folder and use it as the concept's path: the browser
    # opens in the workspace (the demo's concept folder does not exist yet); Up goes to the app's
    page.locator("#concept-concepts-path-browse").click()
    page.locator("#browser.open").wait_for(timeout=30_000)  # the page's one file browser, in the sidebar
    wait_text(page, "#browse-title", r"Choose a folder for", timeout=30)
    folder = field(page, "browse-folder")
    deadline = time.time() + 30
    while time.time() < deadline and folder.input_value() != str(cwd / "workspace"):
        time.sleep(0.3)
    page.locator("#browse-up").click()
    while time.time() < deadline and folder.input_value() != str(cwd):
        time.sleep(0.3)
    entries = "browse-entries"
    pick_entry(page, entries, "📁 my-images")
    page.wait_for_timeout(500)
    pick_entry(page, entries, "📁 cats")
    page.wait_for_timeout(500)
    page.locator("#browse-use").click()
    page.locator("#browser.open").wait_for(state="detached", timeout=30_000)  # "Use this" closes the sidebar
    path = field(page, "concept-concepts-path")
    deadline = time.time() + 30
    while time.time() < deadline and path.input_value() != str(cwd / "my-images" / "cats"):
        time.sleep(0.3)
    assert path.input_value() == str(cwd / "my-images" / "cats")
    saved = cwd / "workspace" / "ui-config.json"
    # the page writes ui-config.json on the first edit (the pick is the first one here)
    while time.time() < deadline + 30 and not (saved.exists() and str(cwd / "my-images" / "cats") in saved.read_text()):
        time.sleep(0.3)
    assert str(cwd / "my-images" / "cats") in saved.read_text()  # the pick reached the config

    # a folder outside the allowed roots is refused with a message
    page.locator("#concept-concepts-path-browse").click()
    page.locator("#browser.open").wait_for(timeout=30_000)
    wait_text(page, "#browse-message", r"empty folder", timeout=30)  # opened on the (empty) cats folder
    folder.fill("/etc")
    folder.press("Enter")
    wait_text(page, "#browse-message", r"Refused", timeout=30)
    page.locator("#browse-close").click()

    # FINE_TUNE_VAE on SD 1.5 (the page's start); PixArt lacks it (SD 1.x/2.x only): the method
    # moves to LoRA with the choices, said in a toast, and the saved config follows
    choose(page, "f-training_method", "FINE_TUNE_VAE")

    def saved_method():
        return json.loads(saved.read_text())["training_method"]

    deadline = time.time() + 30
    while time.time() < deadline and saved_method() != "FINE_TUNE_VAE":
        time.sleep(0.2)
    # the LoRA tab's button goes with the method (Gradio kept it, over an empty tab)
    page.locator("#tab-lora-button").wait_for(state="hidden", timeout=30_000)
    # PixArt has a transformer, no UNet: the UNet settings go, the memory table follows
    choose(page, "f-model_type", "PIXART_ALPHA")
    page.get_by_text("FINE_TUNE_VAE is not available for PIXART_ALPHA; switched to LORA").first.wait_for(timeout=30_000)
    method = page.locator("#f-training_method input").first
    while time.time() < deadline + 30 and not (method.input_value() == "LORA" and saved_method() == "LORA"):
        time.sleep(0.2)
    assert method.input_value() == "LORA" and saved_method() == "LORA"  # the parts below came in the same update
    page.locator("#tab-lora-button").wait_for(state="visible", timeout=30_000)
    open_tab(page, "Training")
    assert not page.locator("#part-unet").is_visible()
    assert page.locator("#part-text_encoder").is_visible()
    open_tab(page, "Model")
    wait_text(page, "#memory-table", r"transformer", timeout=30)
