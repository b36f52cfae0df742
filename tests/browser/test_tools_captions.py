"""The caption editor with the keyboard: type a caption, Shift+Enter for a second line, Enter
saves it to `<image>.txt`; Down on the last line moves to the next image."""

import re

import pytest
from PIL import Image

from tests.browser.page_helpers import open_page, wait_for

pytestmark = pytest.mark.browser


def test_type_caption_and_press_enter(app, browser_page):
    page = browser_page
    folder = app["cwd"] / "workspace" / "caption-data"
    folder.mkdir(parents=True)
    for name, colour in (("a.png", "red"), ("b.png", "blue")):
        Image.new("RGB", (32, 32), colour).save(folder / name)
    (folder / "b.txt").write_text("a blue square")

    page.set_default_timeout(120_000)  # a busy machine hydrates the page slowly
    open_page(page, app["url"])
    page.get_by_role("tab", name="Tools", exact=True).click()
    page.get_by_role("tab", name="Captions", exact=True).click()
    page.locator("#captions-folder textarea, #captions-folder input").first.fill(str(folder))
    page.locator("#captions-open").click()
    current = page.locator("#captions-current textarea, #captions-current input").first
    wait_for(lambda: current.input_value() == "a.png", "a.png to be shown")
    assert re.search(r"2 images", page.locator("#captions-page-info").inner_text())

    editor = page.locator("#captions-editor textarea").first
    editor.click()
    editor.press_sequentially("a red square")
    editor.press("Shift+Enter")
    editor.press_sequentially("red")
    editor.press("Enter")
    caption = folder / "a.txt"
    wait_for(lambda: caption.exists() and caption.read_text() == "a red square\nred", "a.txt to be saved")
    wait_for(lambda: page.locator("#captions-status").inner_text().strip() == "saved a.txt", "the saved message")

    editor.press("ArrowDown")  # the caret is on the last line: next image
    wait_for(lambda: current.input_value() == "b.png", "b.png to be shown")
    wait_for(lambda: editor.input_value() == "a blue square", "b's caption in the editor")
