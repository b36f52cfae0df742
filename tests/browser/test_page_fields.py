"""Fields as a new user fills them: pasted, not typed; renamed concepts; Browse on a folder of
images. One app and one browser for the module."""

import json

import pytest
from PIL import Image

from tests.browser.page_helpers import box, open_page, wait_for

pytestmark = pytest.mark.browser


def ui_config(app):
    try:
        return json.loads((app["workspace"] / "ui-config.json").read_text())
    except (OSError, ValueError):
        return {}


def concept(app):
    return (ui_config(app).get("concepts") or [{}])[0]


def paste(page, elem_id, text):
    """Ctrl+V of `text` over the field's content, as a user pastes a path: no key is typed."""
    page.evaluate("text => navigator.clipboard.writeText(text)", text)
    field = box(page, elem_id)
    field.click()
    field.press("Control+a")
    field.press("Control+v")
    wait_for(lambda: field.input_value() == text, f"the paste to show in {elem_id}")


@pytest.fixture
def pasting_page(module_browser, request):
    context = module_browser.new_context(viewport={"width": 1600, "height": 1000})
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def test_pasted_values_are_saved_and_a_folder_of_images_is_listed(module_app, pasting_page, tmp_path):
    """Pasting into a concept's Folder and Name showed the text but kept the old value in the
    config and the statistics until a key was typed; the selector kept the old name; Browse said
    "(empty folder)" for a folder of images; refusals named config keys and stayed after the fix;
    a preset toasted twice, replaced the concepts and was gone after a reload."""
    page = pasting_page
    images = module_app["cwd"] / "my-cats"  # inside the app's folder: Browse may show it
    images.mkdir(exist_ok=True)
    for i in range(8):
        Image.new("RGB", (32, 32), (30 * i, 0, 0)).save(images / f"cat{i}.png")
    open_page(page, module_app["url"])
    page.get_by_role("tab", name="Concepts", exact=True).click()
    wait_for(lambda: box(page, "concept-select").input_value() == "1. demo", "the demo concept")

    # an empty folder's statistics first: the chart, first drawn empty, stayed empty for the next folder until a reload
    empty = module_app["cwd"] / "no-cats"
    empty.mkdir(exist_ok=True)
    paste(page, "concept-concepts-path", str(empty))
    wait_for(lambda: concept(module_app).get("path") == str(empty), "the pasted empty folder to be saved")
    page.locator("#concept-stats-refresh").click()
    wait_for(lambda: "Cannot read this concept" in page.locator("#tab-concepts").inner_text(), "the empty folder's statistics")

    paste(page, "concept-concepts-path", str(images))
    wait_for(lambda: concept(module_app).get("path") == str(images), "the pasted folder to be saved")
    page.locator("#concept-stats-refresh").click()
    wait_for(lambda: "8 images" in page.locator("#tab-concepts").inner_text(), "the statistics of the pasted folder")
    ticks = '#concept-buckets g.role-axis[aria-label^="Y-axis"] .role-axis-label text'
    wait_for(lambda: page.locator(ticks).count() > 1, "the bucket chart's count axis")
    counts = page.locator(ticks).evaluate_all("es => es.map(e => e.textContent)")
    assert counts[0] == "0" and all(c.isdigit() for c in counts), counts  # from 0, whole images (it began at the smallest count)

    paste(page, "concept-concepts-name", "mycat")
    wait_for(lambda: concept(module_app).get("name") == "mycat", "the pasted name to be saved")
    wait_for(lambda: box(page, "concept-select").input_value() == "1. mycat", "the selector to show the new name")

    page.get_by_role("tab", name="Model", exact=True).click()
    paste(page, "f-base_model_name", "tiny:flux")  # a main-form text field, pasted then left with Tab
    box(page, "f-base_model_name").press("Tab")
    wait_for(lambda: ui_config(module_app).get("base_model_name") == "tiny:flux", "the pasted base model to be saved")
    wait_for(lambda: "looks like Flux.1" in page.locator("#memory-table").inner_text(), "the family mismatch to be named")

    page.get_by_role("tab", name="Concepts", exact=True).click()
    page.locator("#concept-concepts-path-browse").click()
    page.locator("#browser.open").wait_for()
    wait_for(lambda: "8 file(s) here" in page.locator("#browse-message").inner_text(), "the folder's files to be counted")
    page.locator("#browse-entries input").click()
    assert page.get_by_role("option", name="· cat0.png (file)").count() == 1
    page.keyboard.press("Escape")
    page.wait_for_timeout(1000)
    assert "enough output values" not in toasts(page)
    page.locator("#browse-close").click()

    # a refused Start names tab and label, and its list follows the fix
    page.get_by_role("tab", name="Training", exact=True).click()
    paste(page, "f-batch_size", "0")
    box(page, "f-batch_size").press("Tab")
    page.locator("#start").click()
    wait_for(lambda: "Training → Batch size: must be >= 1" in page.locator("#problems").inner_text(), "the refusal by label")
    paste(page, "f-batch_size", "1")
    box(page, "f-batch_size").press("Tab")
    wait_for(lambda: "Batch size" not in page.locator("#problems").inner_text(), "the fixed problem to leave the list")

    # a preset: loaded once (one toast), the concept kept, and still shown after a reload
    page.keyboard.press("Escape")
    box(page, "preset").click()
    page.get_by_role("option", name="sd15-lora", exact=True).click()
    seen = []  # the toasts as first seen: the page is busy for seconds after a preset fills every
    # field (one read took 8 s on 2 cores), so the 10 s toast may be gone by the next read
    wait_for(lambda: seen.append(toasts(page)) or "Preset sd15-lora loaded" in seen[-1], "the preset's toast")
    shown = [seen[-1]]  # watched for 2 s more: a second toast would appear within it
    for _ in range(10):
        page.wait_for_timeout(200)
        shown.append(toasts(page))
    assert max(t.count("Preset sd15-lora loaded") for t in shown) == 1, shown
    assert "your concepts" in shown[0] and concept(module_app).get("name") == "mycat"
    page.reload()
    wait_for(lambda: box(page, "preset").input_value() == "sd15-lora", "the preset to be shown after a reload")


def toasts(page):
    return " | ".join(page.locator(".toast-body").all_inner_texts())
