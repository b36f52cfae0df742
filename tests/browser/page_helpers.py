"""Small Playwright helpers the browser tests share."""

import json
import time
from pathlib import Path


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


def wait_for_preset(page, workspace, preset_workspace_dir="demo", timeout=60):
    """Once a preset is chosen: wait until the server has loaded and saved it (its workspace folder
    in <workspace>/ui-config.json) and the page shows it (window.otConfigLoads, ui/page.py). An
    edit typed while the load is still on its way is undone by it (a busy machine takes seconds),
    and the saved file alone does not say the page has it: the page starts with the demo preset,
    so the file may name the demo before the chosen preset's values reach the browser."""
    path = Path(workspace) / "ui-config.json"

    def saved():
        try:
            return json.loads(path.read_text()).get("workspace_dir", "").endswith(preset_workspace_dir)
        except (OSError, ValueError):
            return False

    wait_for(saved, f"the preset (workspace folder ...{preset_workspace_dir}) to be loaded and saved", timeout)
    page.wait_for_function("(window.otConfigLoads || 0) >= 1", timeout=timeout * 1000)
