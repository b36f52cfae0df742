"""Issue 19 section 0 at the handler level (the browser tests in tests/browser/test_new_user.py
try the same in the page): each test fails on the defect it is named after."""

from pathlib import Path

import gradio as gr
import pytest
from PIL import Image

from ot_gradio.runner.rundir import EventWriter, create_run
from ot_gradio.ui.monitor import REFUSED
from ot_gradio.ui.state import load_ui_config, preset_config
from ot_gradio.ui.visibility import applies, tab_order


def test_add_sends_the_new_choices_with_the_new_selection(page):
    """Item 1: Add set the selector to index 2 while its choices were still [0, 1]; gradio refused
    the value and marked every field of the tab as failed."""
    config = page.on_page_load()[page.config_state]
    (add,) = [fn for fn in page.blocks.fns.values() if any(t == page.concepts.add_button._id for t, _ in fn.targets)]
    assert page.concepts.selector in add.outputs and page.config_state in add.outputs
    out = add.fn(config, 0)
    update = out[page.concepts.selector]
    assert update["value"] == 1 and [v for _, v in update["choices"]] == [0, 1]
    assert out[page.config_state]["concepts"][1]["name"] == "concept 2"
    # gradio accepts the value against the choices sent with it
    page.concepts.selector.choices = update["choices"]
    assert page.concepts.selector.postprocess(update["value"]) == 1
    assert out[page.concepts.fields["name"].component] == "concept 2"


