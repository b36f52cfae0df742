"""Small Playwright helpers the browser tests share."""

import time


def box(page, elem_id):
    return page.locator(f"#{elem_id} textarea, #{elem_id} input").first


def type_into(page, elem_id, text):
    field = box(page, elem_id)
    field.click()
    field.press("Control+a")
    field.press("Delete")
    field.press_sequentially(text)
    field.press("Tab")


def open_tab(page, name):
    page.keyboard.press("Escape")
    page.get_by_role("tab", name=name, exact=True).click()


def wait_for(check, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def open_page(page, url):
    """The page at `url`, once its load has put the saved config in the form (window.otPageLoaded,
    ui/page.py): an edit typed before that would be overwritten by the load's values."""
    page.goto(url)
    page.wait_for_function("window.otPageLoaded === true")
