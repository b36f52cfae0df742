"""A new user's path through the page: the demo preset trained from the browser alone."""

import re
import time
from pathlib import Path

import pytest

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
    page.goto(app["url"])
    choose(page, "preset", "demo")
    page.wait_for_timeout(1500)
    open_tab(page, "Training")
    epochs = field(page, "f-epochs")
    epochs.fill("200")
    epochs.press("Tab")
    page.wait_for_timeout(1000)

    page.locator("#start").click()
    wait_text(page, "#run-status", r"training", timeout=180)
    wait_text(page, "#run-progress", r"step \d+/\d+")
    page.locator("#loss-plot canvas, #loss-plot svg").first.wait_for(timeout=60_000)

    # a sample image arrives (the demo samples every 5 epochs)
    page.locator("#sample-gallery img").first.wait_for(timeout=180_000)

    # reload mid-run: the page reattaches to the running training
    page.reload()
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
    page.goto(app["url"])
    choose(page, "preset", "demo")
    page.wait_for_timeout(1500)
    open_tab(page, "Training")
    lr = field(page, "f-learning_rate")
    lr.fill("abc")
    lr.press("Tab")
    page.wait_for_timeout(1000)
    page.locator("#start").click()
    wait_text(page, "#problems", r"learning_rate", timeout=60)

    lr.fill("0.001")
    lr.press("Tab")
    open_tab(page, "Concepts")
    path = field(page, "concept-concepts-path")
    path.fill(str(Path(app["cwd"]) / "no-such-folder"))
    path.press("Tab")
    page.wait_for_timeout(1000)
    page.locator("#start").click()
    wait_text(page, "#problems", r"concepts\[0\]\.path", timeout=60)
    assert not (app["cwd"] / "workspace" / "demo" / "runs").exists()
