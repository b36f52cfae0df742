"""What the page builds at start-up: one edit handler for all fields, one file browser for all
path fields, and tools built when a session first opens them (first page within 1.3x of
a bare Gradio app: each component and handler costs start-up time; bench/first_page.py)."""

import asyncio
import copy

import gradio as gr

from ot_gradio.ui.page import Page
from ot_gradio.ui.tools_tab import BUILT_AT_START, TOOLS


def handlers(page, method):
    return [fn for fn in page.blocks.fns.values() if getattr(fn.fn, "__func__", None) is method]


def test_one_handler_saves_every_field_and_an_edit_made_while_saving_is_not_dropped(page):
    # one for every field but the training method and the model type, which have their own
    # (tests/ui/test_visibility.py says why for the method; the model type's also fills in the base model)
    edit, *own = sorted(handlers(page, Page.on_edit), key=lambda fn: -len(fn.targets))
    method_id, type_id = page.fields["training_method"].component._id, page.fields["model_type"].component._id
    [method] = [fn for fn in own if fn.targets == [(method_id, "input")]]
    [model_type] = [fn for fn in own if fn.targets == [(type_id, "input")]]
    # "once" (gradio's default for .input) ignores an edit made while the previous one is saved,
    # "always_last" keeps only the newest pending one: each edit applies its own field, so each runs
    assert edit.trigger_mode == method.trigger_mode == model_type.trigger_mode == "multiple" and len(own) == 2
    fields = {f.component._id for p, f in page.fields.items() if p not in ("optimizer.optimizer", "training_method", "model_type")}
    assert {block for block, _ in edit.targets} == fields
    # only the model type's edit writes the base model: as an output of every field's edit it kept
    # the page busy for seconds after a preset load (each text field's change fires an edit)
    base = page.fields["base_model_name"].component
    assert base in model_type.outputs and base not in edit.outputs
    # a text box is saved on change: its input event fires on keys only, not on a paste
    texts = {f.component._id for f in page.fields.values() if isinstance(f.component, gr.Textbox)}
    assert {block for block, event in edit.targets if event == "change"} == texts & fields
    concept = [fn for fn in page.blocks.fns.values() if fn.outputs == [page.config_state, page.concepts.selector] and len(fn.targets) > 10]
    assert len(concept) == 1 and concept[0].trigger_mode == "multiple"
    assert {b for b, _ in concept[0].targets} == {f.component._id for f in page.concepts.fields.values()}


def test_an_edit_applies_only_the_field_that_fired_it(page):
    """While a page loads, the first text box it fills in fires its change event with every other
    field still at its built-in default: those values must not reach the config (they reset the
    training method to FINE_TUNE, the device to cuda... and were saved to the workspace)."""
    config = page.on_page_load()[page.config_state]
    assert config["training_method"] == "LORA" and config["train_device"] == "cpu"  # the demo preset
    stale = {**page.form_values(config), **{f.component: f.component.value for f in page.fields.values()}}  # as built
    epochs = page.fields["epochs"].component
    out = page.on_edit({**stale, epochs: 7}, gr.EventData(epochs, None))[page.config_state]
    assert out == {**config, "epochs": 7}
    assert page.on_page_load()[page.config_state] == out  # that is what was saved
    # a text box's change event when the page filled it in: nothing changes
    workspace = page.fields["workspace_dir"].component
    nothing = page.on_edit({**stale, page.config_state: out, workspace: out["workspace_dir"]}, gr.EventData(workspace, None))
    # and Gradio takes that for "no update" (an empty dict failed the event with a toast on the page)
    edit = max(handlers(page, Page.on_edit), key=lambda fn: len(fn.targets))
    assert len(asyncio.run(page.blocks.postprocess_data(edit, nothing, None))) == len(edit.outputs)
    # once an update changed a field's props (shown/hidden), Gradio's session holds a copy of the
    # component built anew from its arguments (gradio/blocks.py: an id of its own, the same elem_id)
    # and the event names that copy: still only that field applies
    alpha = page.fields["lora_alpha"].component
    shown = type(alpha)(**{**alpha.constructor_args, "visible": False, "render": False})
    assert shown._id != alpha._id and shown.elem_id == alpha.elem_id
    assert page.on_edit({**stale, page.config_state: out, alpha: 2.5}, gr.EventData(shown, None))[page.config_state] == {**out, "lora_alpha": 2.5}
    # an event from a component that is no field of the form applies nothing
    assert page.on_edit({**stale, page.config_state: out}, gr.EventData(gr.Textbox(), None)) == gr.skip()
    changed = page.on_edit({**stale, page.config_state: out, epochs: 8}, gr.EventData(epochs, None))
    assert changed[page.config_state] == {**out, "epochs": 8}
    assert len(asyncio.run(page.blocks.postprocess_data(edit, changed, None))) == len(edit.outputs)


def test_a_concept_edit_applies_only_the_field_that_fired_it(page):
    config = page.on_page_load()[page.config_state]
    (edit,) = [fn for fn in page.blocks.fns.values() if fn.outputs == [page.config_state, page.concepts.selector] and len(fn.targets) > 10]
    fields = page.concepts.fields
    stale = {page.config_state: config, page.concepts.selector: 0, **{f.component: f.component.value for f in fields.values()}}
    name = fields["name"].component
    out = edit.fn({**stale, name: "cats"}, gr.EventData(name, None))[page.config_state]
    assert out["concepts"] == [{**config["concepts"][0], "name": "cats"}]
    out = edit.fn({**stale, page.config_state: out, name: "dogs"}, gr.EventData(copy.copy(name), None))[page.config_state]  # a session copy
    assert out["concepts"] == [{**config["concepts"][0], "name": "dogs"}]
    twin = copy.copy(name)  # a copy an update re-created: an id of its own, the same elem_id
    twin._id = 10**9
    out = edit.fn({**stale, page.config_state: out, name: "owls"}, gr.EventData(twin, None))[page.config_state]
    assert out["concepts"] == [{**config["concepts"][0], "name": "owls"}]


def test_every_path_field_uses_the_one_file_browser(page):
    browsers = [f.browser for f in [*page.fields.values(), *page.concepts.fields.values()] if f.browser is not None]
    assert len(browsers) >= 10
    assert all(b.panel is page.browser for b in browsers)
    assert set(page.browser.browsers) == {b.elem_id for b in browsers}
    assert isinstance(page.browser.sidebar, gr.Sidebar)


def test_use_this_reaches_the_field_it_was_opened_for(page, tmp_path):
    data = tmp_path / "cats"
    data.mkdir()
    config = page.on_page_load()[page.config_state]
    concept = page.concepts.fields["path"].browser
    assert page.browser.for_target("", lambda b: b.go(str(data), config)) == {
        page.browser.message: "**Refused:** press Browse next to a path field first"}
    out = page.browser.for_target(concept.elem_id, lambda b: b.use_it(str(data), None, "", config))
    assert out[concept.field] == str(data.resolve())

    values = {**page.form_values(config), concept.field: out[concept.field], page.browser.target: concept.elem_id}
    assert page.on_browsed(values)[page.config_state]["concepts"][0]["path"] == str(data.resolve())
    workspace = page.fields["workspace_dir"]
    values = {**page.form_values(config), workspace.component: str(tmp_path / "ws2"), page.browser.target: workspace.browser.elem_id}
    assert page.on_browsed(values)[page.config_state]["workspace_dir"] == str(tmp_path / "ws2")
    assert page.on_page_load()[page.config_state]["workspace_dir"] == str(tmp_path / "ws2")  # autosaved


def test_tools_are_built_when_a_session_opens_them_not_at_start_up(page):
    elem_ids = {getattr(b, "elem_id", None) for b in page.blocks.blocks.values()}
    assert {f"tool-{module}" for _, module, _ in TOOLS} <= elem_ids  # the sub-tabs are there
    assert not {"captions-folder", "autocaption-folder", "tool-sample-base-model"} & elem_ids  # their insides are not
    assert {"masks-folder", "mask-editor"} <= elem_ids  # the mask editor is built with the page (tools_tab.BUILT_AT_START)
    renders = [fn for fn in page.blocks.fns.values() if fn.renderable is not None]
    assert len(renders) == len(TOOLS) - len(BUILT_AT_START)


def test_start_up_size_budget(page):
    # 750 components and 416 handlers before the first-page work; a page that grows far
    # past this budget is slower to serve (bench/first_page.py measures the time). The run bar added
    # ~40 layout blocks (the run bar, the Run tab, ~30 group/grid containers: no handlers) and the Runs tab;
    # one handler re-checks a refused Start's problem list on each change of the config, one
    # refills the Masks folder (built at start-up) from the session's concepts when its tab opens;
    # the transformer part's own file field (transformer.model_name, read as OneTrainer reads it) adds one;
    # the VAE's own model field one more. OneTrainer's newer optimizers made ~50 optimizer settings
    # real (each a field shown for the optimizers that read it) and OFT v2 three LoRA-tab fields.
    # The training method's edits have their own handler (its choices follow the model type).
    # HiDream's Text encoder 4 group (its Llama model field with its handler) is real now, not planned.
    # The model type's edits have their own handler too (it may fill in the base model).
    # Wan 2.2 A14B's Trained expert is one more field.
    assert len(page.blocks.blocks) <= 731 and len(page.blocks.fns) <= 85
