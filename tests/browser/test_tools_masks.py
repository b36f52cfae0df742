"""Mask painting in the browser: a stroke on the editor canvas becomes `<image>-masklabel.png`
at the image's own size, even though the canvas on screen is drawn at another size."""

import re
import time

import numpy as np
import pytest
from PIL import Image

from tests.browser.page_helpers import open_page

pytestmark = pytest.mark.browser

IMAGE_W, IMAGE_H = 1200, 600  # larger than the editor's 640 px high box: the canvas is drawn scaled


def wait_text(page, selector, pattern, timeout=60):
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = page.locator(selector).inner_text()
        if re.search(pattern, text):
            return text
        time.sleep(0.3)
    raise AssertionError(f"{selector} never matched {pattern!r}; last text: {text[-500:]}")


def test_paint_stroke_saves_mask_at_image_size(app, browser_page):
    page = browser_page
    folder = app["cwd"] / "workspace" / "mask-data"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (IMAGE_H, IMAGE_W, 3), dtype=np.uint8)).save(folder / "a.png")
    Image.new("RGB", (64, 64), "gray").save(folder / "b.jpg")

    page.set_default_timeout(120_000)  # a busy machine draws the 1200x600 editor canvas slowly (a click waited > 30 s in CI)
    open_page(page, app["url"])
    page.get_by_role("tab", name="Tools", exact=True).click()
    page.get_by_role("tab", name="Masks", exact=True).click()
    box = page.locator("#masks-folder textarea, #masks-folder input").first
    box.fill(str(folder))
    page.locator("#masks-open").click()
    wait_text(page, "#mask-status", r"a\.png \(1200×600\); no mask yet")

    canvas = page.locator("#mask-editor canvas").first
    canvas.wait_for(state="visible")
    page.wait_for_timeout(2000)  # the editor loads the background and the layer into its canvas
    page.locator("#mask-editor").scroll_into_view_if_needed()  # mouse events only land inside the viewport
    page.wait_for_timeout(500)
    rect = canvas.bounding_box()
    assert rect and rect["width"] > 100
    # a stroke across the middle of the canvas; few move events: a software-rendered canvas redraws on each
    y = rect["y"] + rect["height"] * 0.5
    page.mouse.move(rect["x"] + rect["width"] * 0.3, y)
    page.wait_for_timeout(300)
    uploads = []  # the editor's image and layers sent to the server: only by Save, never while painting
    page.on("request", lambda r: uploads.append(r.url) if "/gradio_api/upload" in r.url else None)
    page.mouse.down()
    for i in range(1, 5):
        page.mouse.move(rect["x"] + rect["width"] * (0.3 + 0.1 * i), y)
    page.mouse.up()
    page.wait_for_timeout(2000)  # the run bar polls each second: its events must not make the editor upload
    assert uploads == [], f"{len(uploads)} uploads while painting one stroke"
    page.screenshot(path=str(app["cwd"] / "stroke.png"))

    page.locator("#mask-save").click()
    text = wait_text(page, "#mask-status", r"saved|not saved", timeout=180)
    mask_file = folder / "a-masklabel.png"
    assert "saved " + str(mask_file) in text, text
    assert "(1200×600)" in text
    with Image.open(mask_file) as img:
        assert img.size == (IMAGE_W, IMAGE_H) and img.mode == "L"
        arr = np.asarray(img)
    assert set(np.unique(arr)) == {0, 255}
    ys, xs = np.nonzero(arr)
    # the stroke runs across the middle, from about 30 % to 70 % of the width
    assert abs(ys.mean() - IMAGE_H / 2) < IMAGE_H * 0.15
    assert xs.min() < IMAGE_W * 0.4 and xs.max() > IMAGE_W * 0.6
    assert (arr == 255).mean() < 0.3
    assert not (folder / "a-masklabel.png.bak").exists()
    # the image list now marks a.png as having a mask
    deadline = time.time() + 30
    while time.time() < deadline and page.locator("#masks-image input").first.input_value() != "a.png · mask":
        time.sleep(0.3)
    assert page.locator("#masks-image input").first.input_value() == "a.png · mask"

    # the saved mask loads back as an editable layer and survives a save without edits
    page.locator("#masks-next").click()
    wait_text(page, "#mask-status", r"b\.jpg \(64×64\)")
    page.locator("#masks-prev").click()
    wait_text(page, "#mask-status", r"a\.png \(1200×600\); mask a-masklabel\.png loaded")
    page.wait_for_timeout(2000)
    page.locator("#mask-save").click()
    wait_text(page, "#mask-status", r"saved|not saved", timeout=180)
    assert (folder / "a-masklabel.png.bak").exists()
    with Image.open(mask_file) as img:
        assert (np.asarray(img) == arr).all()
