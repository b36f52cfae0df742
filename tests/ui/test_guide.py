"""The getting-started guide: each step's button opens its tab."""

import gradio as gr
import pytest

from ot_gradio.ui.guide import STEPS, go_to


def test_go_to_selects_the_tab():
    out = go_to("concepts", {"training_method": "LORA"})
    assert isinstance(out, gr.Tabs) and out.selected == "concepts"
    assert go_to("lora", {"training_method": "LORA"}).selected == "lora"


def test_a_tab_hidden_for_the_method_stays_closed():
    with pytest.warns(UserWarning, match="another training method"):
        assert "selected" not in go_to("embedding", {"training_method": "LORA"})


def test_the_guide_follows_the_wiki_workflow():
    sections = [title for title, _ in STEPS]
    assert sections == ["Prepare the environment", "Prepare the training", "Decide the model and training details",
                        "Optimizer and method", "Learning rate, epochs, warmup"]
    tabs = [step.tab for _, steps in STEPS for step in steps]
    assert tabs[:4] == ["model", "model", "general", "concepts"]  # model and preset, base model, folders, concepts


def test_every_step_opens_a_tab_of_the_page(page):
    ids = {"start", "concepts", "tools", *page.tab_handles}
    for _, steps in STEPS:
        for step in steps:
            assert step.tab in ids, step.title
    assert page.tabs.elem_id == "tabs"
    assert {tab: handle.id for tab, handle in page.tab_handles.items()} == {tab: tab for tab in page.tab_handles}



def test_the_weight_types_step_opens_the_tab_it_names_and_that_holds_the_fields():
    """Step 8 said "the Model tab" and opened Training (where the weight data types are)."""
    from ot_gradio.config.fields import iter_fields
    from ot_gradio.config.schema import TrainConfig

    step = next(s for _, steps in STEPS for s in steps if s.title == "Weight data types")
    assert {f.tab for f in iter_fields(TrainConfig) if f.path.endswith(".weight_dtype")} == {step.tab} == {"training"}
    assert "Training tab" in step.text
