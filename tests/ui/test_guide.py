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


def test_the_guide_names_a_preset_for_every_implemented_model_type():
    """Each model type the page offers points to a preset file in presets/ that sets that model
    type and a method the family trains, and that loads without warnings."""
    from ot_gradio.config.catalogue import offered
    from ot_gradio.config.enums import ModelType
    from ot_gradio.config.families import supports
    from ot_gradio.config.io import config_to_dict, load_config
    from ot_gradio.config.presets import apply_preset, load_preset, resolve_preset_path
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.ui.guide import PRESETS, presets_table

    implemented = offered(ModelType)
    assert set(PRESETS) == set(implemented), "the guide's presets and the implemented model types differ"
    table = presets_table().splitlines()
    assert len(table) == 2 + len(implemented)
    for model_type in implemented:
        name, _ = PRESETS[model_type]
        assert resolve_preset_path(name) is not None, f"{model_type}: presets/{name}.json does not exist"
        loaded = load_config(apply_preset(config_to_dict(TrainConfig()), load_preset(name)))
        assert loaded.warnings == [], name
        config = loaded.config
        assert config.model_type == model_type, f"{name} sets {config.model_type}, the guide names it for {model_type}"
        assert supports(model_type, config.training_method), name
        assert any(row.startswith(f"| {model_type.value} | *{name}* |") for row in table), model_type


def test_the_guide_says_flux_fill_needs_masks():
    from ot_gradio.config.enums import ModelType
    from ot_gradio.ui.guide import PRESETS

    name, note = PRESETS[ModelType.FLUX_FILL_DEV_1]
    assert name == "flux-fill-dev-1-lora" and "needs masks" in note and "masklabel" in note


def test_the_presets_table_is_in_the_guide():
    from ot_gradio.ui.guide import build_guide, presets_table

    with gr.Blocks() as demo:
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Start", id="start"):
                build_guide(tabs, gr.State({}))
    accordions = [b for b in demo.blocks.values() if isinstance(b, gr.Accordion)]
    assert [a.label for a in accordions] == ["Presets per model type"] and not accordions[0].open
    markdown = [b.value for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    assert presets_table() in markdown
