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


def relays(page):
    """The fields' browser-side edit events: no server handler, the edit log their one output."""
    return [fn for fn in page.blocks.fns.values() if fn.fn is None and fn.outputs == [page.edit_log]]


def test_one_handler_saves_every_field_and_an_edit_made_while_saving_is_not_dropped(page):
    # every field but the optimizer, the training method and the model type (their own handlers:
    # tests/ui/test_visibility.py says why for the method; the model type's also fills in the base
    # model) logs its edits in the browser, and one server handler applies the log
    fields = {p: f for p, f in page.fields.items() if p not in ("optimizer.optimizer", "training_method", "model_type")}
    logged = relays(page)
    assert sorted(b for fn in logged for b, _ in fn.targets) == sorted(f.component._id for f in fields.values())
    for fn in logged:  # each its own field's value and path, in the browser, never queued
        (field,) = [(p, f) for p, f in fields.items() if fn.targets[0][0] == f.component._id]
        assert fn.inputs == [field[1].component] and f'"{field[0]}"' in fn.js and not fn.queue
        # "once" (gradio's default for .input) would drop an edit made right after another
        assert fn.trigger_mode == "multiple"
    (apply,) = handlers(page, Page.on_edit_log)
    assert apply.targets == [(page.edit_log._id, "change")] and apply.trigger_mode == "multiple"
    # the few inputs are the point: Gradio's page refreshes every input of an event that ran on
    # each status message of any event (ui/edit_log.py)
    assert set(apply.inputs) == {page.config_state, page.edit_log, page.edits_applied}
    method, model_type = (page.fields[p].component for p in ("training_method", "model_type"))
    [own_method] = [fn for fn in handlers(page, Page.on_edit) if fn.targets == [(method._id, "input")]]
    [own_type] = [fn for fn in handlers(page, Page.on_edit) if fn.targets == [(model_type._id, "input")]]
    assert own_method.trigger_mode == own_type.trigger_mode == "multiple"
    assert set(own_method.inputs) == {page.config_state, method} and set(own_type.inputs) == {page.config_state, model_type}
    # only the model type's edit writes the base model: as an output of every field's edit it kept
    # the page busy for seconds after a preset load (each text field's change fires an edit)
    base = page.fields["base_model_name"].component
    assert base in own_type.outputs and base not in apply.outputs
    # a text box is logged on change: its input event fires on keys only, not on a paste
    texts = {f.component._id for f in fields.values() if isinstance(f.component, gr.Textbox)}
    assert {b for fn in logged for b, event in fn.targets if event == "change"} == texts
    # no server handler takes every field as inputs: Start, Add to queue and the estimate read the log
    for fn in page.blocks.fns.values():
        if fn.fn is not None:
            assert len([b for b in fn.inputs if b in page.components]) <= 20, fn.name
    # the concept fields' edits too, each with the concept selected when it was made
    concepts = page.concepts
    logged = [fn for fn in page.blocks.fns.values() if fn.fn is None and fn.outputs == [concepts.log]]
    assert sorted(b for fn in logged for b, _ in fn.targets) == sorted(f.component._id for f in concepts.fields.values())
    assert all(fn.inputs[1:] == [concepts.selector] and fn.trigger_mode == "multiple" for fn in logged)
    # the handlers that write the session's config run one at a time (two at once: the later
    # write dropped the earlier's edit)
    writers = [fn for fn in page.blocks.fns.values() if fn.fn is not None and page.config_state in fn.outputs]
    assert len(writers) > 10 and {(fn.concurrency_id, fn.concurrency_limit) for fn in writers} == {("config", 1)}
    # and so do Start, Add to queue and the estimate's read of the form: gradio reads an event's
    # inputs one by one, so an edit saved between its read of the config and of the log's applied
    # count was in neither, and Start ran without it
    counts = {page.edits_applied, concepts.applied}
    readers = [fn for fn in page.blocks.fns.values() if fn.fn is not None and page.config_state in fn.inputs and counts & set(fn.inputs)]
    assert {fn.name for fn in readers} >= {"on_start", "on_add", "on_estimate_memory"}
    # and showing a concept: its fields filled in from a config read before an edit's save would
    # log the old values after the edit
    (show,) = [fn for fn in page.blocks.fns.values() if fn.targets == [(concepts.selector._id, "input")]]
    assert {(fn.concurrency_id, fn.concurrency_limit) for fn in [*readers, show]} == {("config", 1)}
    (apply,) = [fn for fn in page.blocks.fns.values() if fn.targets == [(concepts.log._id, "change")]]
    assert set(apply.inputs) == {page.config_state, concepts.log, concepts.applied} and apply.trigger_mode == "multiple"


def test_the_edit_log_applies_each_new_entry_once_in_order_and_start_reads_one_still_on_its_way(page):
    config = page.on_page_load()[page.config_state]
    log = '[[1, "epochs", 7], [2, "lora_alpha", 2.5], [3, "epochs", 9]]'
    out = page.on_edit_log({page.config_state: config, page.edit_log: log, page.edits_applied: 0})
    assert out[page.config_state] == {**config, "epochs": 9, "lora_alpha": 2.5} and out[page.edits_applied] == 3
    assert page.on_page_load()[page.config_state] == out[page.config_state]  # saved
    # entries already applied are not applied again (a preset may have changed the field since)
    later = {**out[page.config_state], "epochs": 4}
    assert page.on_edit_log({page.config_state: later, page.edit_log: log, page.edits_applied: 3}) == gr.skip()
    # the page filling a field in logs the value the config has: nothing saved or redrawn
    same = page.on_edit_log({page.config_state: later, page.edit_log: log[:-1] + ', [4, "epochs", 4]]', page.edits_applied: 3})
    assert same == {page.edits_applied: 4}
    # a field that is not the form's, and a log that is not ours, apply nothing
    assert page.on_edit_log({page.config_state: later, page.edit_log: '[[5, "nope", 1]]', page.edits_applied: 4}) == {page.edits_applied: 5}
    assert page.on_edit_log({page.config_state: later, page.edit_log: "{oops", page.edits_applied: 4}) == gr.skip()
    # Start (and Add to queue, the estimate) read an edit the server has not applied yet
    values = {page.config_state: later, page.edit_log: '[[5, "epochs", 11]]', page.edits_applied: 4}
    assert page._form_config(values)["epochs"] == 11 and page._config_of(values)["epochs"] == 11


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


def test_a_concept_edit_applies_to_the_concept_it_was_made_on(page):
    config = page.on_page_load()[page.config_state]
    concepts = page.concepts
    config, _ = concepts.add(config, 0)  # a second concept
    (edit,) = [fn for fn in page.blocks.fns.values() if fn.targets == [(concepts.log._id, "change")]]
    log = '[[1, "name", "cats", 0], [2, "name", "dogs", 1], [3, "nope", 1, 0], [4, "name", "owls", 7]]'
    out = edit.fn({page.config_state: config, concepts.log: log, concepts.applied: 0})
    assert [c["name"] for c in out[page.config_state]["concepts"]] == ["cats", "dogs"] and out[concepts.applied] == 4
    assert out[concepts.selector]["choices"] == [("1. cats", 0), ("2. dogs", 1)]  # renamed in the selector too
    # applied once: a later change of the name is not undone by the same entries
    renamed = copy.deepcopy(out[page.config_state])
    renamed["concepts"][0]["name"] = "birds"
    assert edit.fn({page.config_state: renamed, concepts.log: log, concepts.applied: 4}) == gr.skip()
    # Start reads an edit still on its way
    values = {page.config_state: renamed, page.edit_log: "", page.edits_applied: 0, concepts.selector: 0,
              concepts.log: log[:-1] + ', [5, "name", "bats", 0]]', concepts.applied: 4}
    assert [c["name"] for c in page._config_of(values)["concepts"]] == ["bats", "dogs"]


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
    # The fields' edits are logged in the browser (ui/edit_log.py): one event each, with no server
    # handler; each edit log (the form's, the concepts') adds a hidden text box and a State.
    # Wan 2.2 A14B's Trained expert is one more field; Ideogram 4's unconditional transformer's
    # weight type another (its group, shown for that family). Eight OneTrainer options became real
    # (circular padding, the two mask augmentations, the learning rate and loss scalers, only cache,
    # samples to TensorBoard, prevent overwrites): eight fields, no handler; then the transformer's
    # attention mask, masked prior preservation and the custom conditioning image: three more. Debug mode
    # and its folder are real now (General tab, advanced): the folder's Browse button, one block and its handler.
    # SVDQuant's data type, rank and cache folder (beside the quantization layer filter; the folder is a path
    # field: its row, Browse button and form, six blocks in all), with its Browse handler. The embedding's
    # Output embedding check box is real now: one field, no handler. OneTrainer's four LoKr switches (weight
    # decompose, DoRA on output, full matrix, vec trick): four fields. The sample video format (MP4 or an
    # image sequence) is real: one field, shown for video families; so is the fallback train data type
    # (Training tab, advanced, under Precision and speed): one more. A concept's Text variations is real: one more.
    # Async gradient reduce (General tab, multi-GPU) and percentile clipping (optimizer): two more. The
    # concept's three groups lay their fields in the page's grid: a column each, three more. The random
    # clip window (Training tab, shown for video families): one field, no handler. Wan 2.2 TI2V 5B's
    # Image-to-video share: one field, no handler. The memory estimate reads the form in the edits'
    # turn and estimates after it (a model load must not hold up the edits): a State and a handler.
    # The Concepts tab's note for no concept (its fields hidden then): one block. Its Upload images
    # button with its note in a row (images from the user's computer): three blocks and a handler.
    # The Civitai API key (General tab, for a base model on Civitai): one field, no handler. Tools →
    # Video (clips and images from long videos), built when first opened: its tab, its State and
    # render, two handlers. The Runs tab's table opens the run of the row clicked: one handler. A concept's
    # Caption without a file (kohya's class tokens): one field, no handler. kohya's multires noise (iterations
    # and discount, Training tab) and max norm (LoRA tab): three fields, no handler. Max caption tokens
    # (CLIP read in windows of 75, in the Text encoder's section): one block.
    # Don't upscale small images (kohya's bucket_no_upscale, Data tab): one field. kohya's random offset and
    # perturbation strengths and adaptive noise scale: three more, with the multires ones in a group of their own
    # (kohya's noise options, closed): its accordion and form. kohya's rank and module dropout (LoRA tab): two more.
    # kohya's buckets (Data tab): the bucket step and the smallest and largest bucket side, three fields.
    # SD 3's T5 window (shown for SD 3 / 3.5): one more. A concept's Alpha as mask (kohya's alpha_mask): one more.
    # A concept's caption prefix and suffix (kohya's caption_prefix / caption_suffix): two more. Keep last saves
    # (Backup tab, kohya's save_last_n_epochs): one more. The text encoder files of Flux, Chroma and SD 3 (Text
    # encoder, 2 and 3: path fields with their Browse buttons): twelve blocks and the three buttons' handlers.
    # A concept's Control image folder (image-editing models: ai-toolkit's control_path, musubi-tuner's
    # control_directory): one field, no handler. A concept's Trigger word (ai-toolkit's trigger_word): one more.
    # Whole-caption dropout (Data tab: kohya's, ai-toolkit's and diffusion-pipe's caption dropout): one more.
    # A concept's Caption file lines (each line a caption, the first only, or the whole file): one more.
    # A concept's Captions file (kohya's metadata_file, a captions.json or metadata.jsonl elsewhere): a path
    # field with its Browse button, five blocks and the button's handler. Its Underscores as spaces (SimpleTuner's
    # file-name captions): one more. A concept's Spread frames over the clip (video models; ai-toolkit's
    # shrink_video_to_frames): one more. Its Files trained (video models: musubi-tuner's image / video folders): one more.
    # The note of a part left out of the run (Include off), in each of the five groups that have Include: five blocks.
    # The layer preset and filter on the Training tab (a LoRA's layers and a fine-tune's weights): their group, two blocks.
    server = [fn for fn in page.blocks.fns.values() if fn.fn is not None]
    assert len(page.blocks.blocks) <= 839 and len(server) <= 96
    concept_relays = [fn for fn in page.blocks.fns.values() if fn.fn is None and fn.outputs == [page.concepts.log]]
    loaded = [fn for fn in page.blocks.fns.values() if fn.fn is None and "otPageLoaded" in (fn.js or "")]
    shown = [fn for fn in page.blocks.fns.values() if fn.fn is None and "otConfigLoads" in (fn.js or "")]
    method_tabs = [fn for fn in page.blocks.fns.values() if fn.fn is None and "tab-${tab}-button" in (fn.js or "")]
    assert len(page.blocks.fns) - len(server) == len(relays(page)) + len(concept_relays) + len(loaded) + len(shown) + len(method_tabs)
    assert len(loaded) == 1 and len(shown) == 3  # a preset, a loaded file, an uploaded file
    assert len(method_tabs) == 1  # the method's tabs' buttons, in the browser


def test_gradios_share_hint_is_said_this_apps_way():
    """Gradio prints 'set `share=True` in `launch()`' at start-up, which a user of app.py cannot
    do; the line says --share with --auth instead, and everything else passes as it is."""
    import io

    from ot_gradio.ui.launch import GRADIO_SHARE_HINT, OwnHints

    out = io.StringIO()
    stream = OwnHints(out)
    stream.write(f"* Running on local URL:  http://127.0.0.1:7860\n* {GRADIO_SHARE_HINT}\n")
    stream.flush()
    assert out.getvalue() == ("* Running on local URL:  http://127.0.0.1:7860\n"
                              "* For a share link, start with --share --auth USER:PASSWORD (a password is required).\n")
