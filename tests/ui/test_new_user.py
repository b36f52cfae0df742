"""What broke for a new user, at the handler level (the browser tests in tests/browser/test_new_user.py
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
    """Add set the selector to index 2 while its choices were still [0, 1]; gradio refused
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


def test_whole_numbers_have_no_browser_side_bounds(page):
    """Gradio's gr.Number(minimum=1) refused batch size 0 before any handler, naming no field."""
    numbers = [f for f in page.fields.values() if isinstance(f.component, gr.Number)]
    assert numbers
    assert all(f.component.minimum is None and f.component.maximum is None for f in numbers)
    assert page.fields["batch_size"].component.preprocess(0) == 0


def test_schema_problems_and_missing_folders_are_listed_together(page, fake_start):
    """Batch size 0 and a missing concept folder in one attempt: both named."""
    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields["batch_size"].component] = 0
    values[page.concepts.fields["path"].component] = str(Path.cwd() / "no-such-folder")
    with pytest.warns(UserWarning, match="2 problem"):
        out = page.on_start(values)
    problems = out[page.monitor.problems]
    assert "`Training → Batch size: must be >= 1 (got 0)`" in problems, problems
    assert "`Concepts → Concept 1 'demo' → Folder: folder" in problems, problems
    assert not fake_start


def test_a_refused_start_clears_the_previous_run_from_the_footer(page, fake_start):
    """After a refused Start, the poll showed the last run's status and loss."""
    old = create_run(page.workspace, {"tensorboard": False})
    writer = EventWriter(old)
    writer.status("training")
    writer.emit("metrics", global_step=1, loss=0.5, lr=0.001)
    writer.status("stopped")
    writer.close()
    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields["batch_size"].component] = 0
    with pytest.warns(UserWarning):
        out = page.on_start(values)
    assert out[page.monitor.run_id] == REFUSED
    run_id, status, progress, losses, lrs, gallery, *_ , shown = page.monitor.poll(REFUSED, "")
    assert run_id == REFUSED and "Nothing started" in status and "stopped" not in status
    assert losses is None and lrs is None and progress == "" and gallery == ""
    assert page.monitor.poll("", "")[0] == str(old.path)  # a reload shows the last run again


def test_the_live_charts_are_numeric_and_only_sent_when_they_change(page, tmp_path):
    """An empty first frame typed the chart's axes as categories (and fixed its series
    colours) for the whole run; every poll redrew the charts."""
    run = create_run(page.workspace, {"tensorboard": False})
    writer = EventWriter(run)
    writer.status("training")
    out = page.monitor.poll(str(run.path), "")
    assert out[3] is None and out[4] is None  # no points: nothing drawn, not an empty frame
    for step in (1, 2, 3):
        writer.emit("metrics", global_step=step, loss=1.0 / step, lr=0.001)
    writer.emit("progress", global_step=3, total_steps=400)
    out = page.monitor.poll(str(run.path), out[-1])
    plotted = page.monitor.loss_plot.postprocess(out[3]["value"])
    assert plotted.datatypes == {"step": "quantitative", "loss": "quantitative", "series": "nominal"}
    assert page.monitor.lr_plot.postprocess(out[4]["value"]).datatypes == {"step": "quantitative", "lr": "quantitative"}
    # three steps on an axis of the run's 400: whole-step ticks (3 steps were ticked 1.0, 1.5, 2.0...)
    assert out[3]["x_lim"] == out[4]["x_lim"] == [0, 400]
    again = page.monitor.poll(str(run.path), out[-1])
    assert again[-1] == out[-1]
    assert list(again[3:6]) == [gr.skip()] * 3  # unchanged: the charts and samples stay as drawn
    writer.emit("metrics", global_step=4, loss=0.2, lr=0.001)
    assert len(page.monitor.poll(str(run.path), out[-1])[3]["value"]) == 8  # changed: sent again
    writer.close()


def test_samples_are_shown_at_their_size_newest_first_with_step_and_prompt(page, tmp_path):
    """A gallery stretched one 64 px sample over the whole width."""
    run = create_run(page.workspace, {"tensorboard": False})
    writer = EventWriter(run)
    for step, colour in ((5, "red"), (10, "blue")):
        path = run.samples / f"{step}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (64, 64), colour).save(path)
        writer.emit("sample", path=str(path), prompt=f"a {colour} <circle>", step=step)
    writer.close()
    html = page.monitor.poll(str(run.path), "")[5]
    assert html.index("step 10: a blue &lt;circle&gt;") < html.index("step 5: a red &lt;circle&gt;")
    assert html.count("<img ") == 2 and "width=" not in html and "gradio_api/file=" in html


def test_presets_land_in_the_apps_workspace(page, tmp_path):
    """The demo's relative workspace/demo was read against the folder the app started in."""
    elsewhere = tmp_path / "elsewhere"
    config = preset_config("demo", elsewhere)
    assert config["workspace_dir"] == str(elsewhere.resolve() / "demo")
    assert config["output_model_destination"] == str(elsewhere.resolve() / "demo" / "models" / "demo-lora.safetensors")
    assert config["concepts"][0]["path"] == str(elsewhere.resolve() / "demo-data" / "shapes")
    assert load_ui_config(elsewhere)["workspace_dir"] == str(elsewhere.resolve() / "demo")  # a first start
    out = page.on_preset("demo")
    assert out[page.fields["workspace_dir"].component] == str(page.workspace.resolve() / "demo")  # the General tab


def test_fields_that_do_not_apply_are_hidden(page):
    """Multi-GPU options with multi-GPU off, the custom scheduler with CONSTANT, LoKr and
    DoRA options for plain LoRA; rank and alpha first on the LoRA tab."""
    base = {"multi_gpu": False, "learning_rate_scheduler": "CONSTANT", "peft_type": "LORA", "lora_decompose": False}
    for path in ("device_indexes", "fused_gradient_reduce", "custom_learning_rate_scheduler", "scheduler_params",
                 "lokr_dim", "lora_decompose_norm_epsilon"):
        assert not applies(path, base), path
    assert applies("lora_rank", base) and applies("lora_decompose", base)
    assert applies("device_indexes", {**base, "multi_gpu": True})
    assert applies("scheduler_params", {**base, "learning_rate_scheduler": "CUSTOM"})
    assert not applies("learning_rate_cycles", base) and not applies("learning_rate_min_factor", base)
    assert applies("learning_rate_cycles", {**base, "learning_rate_scheduler": "COSINE_WITH_RESTARTS"})
    assert applies("learning_rate_min_factor", {**base, "learning_rate_scheduler": "COSINE"})
    assert applies("lokr_dim", {**base, "peft_type": "LOKR"}) and not applies("lora_rank", {**base, "peft_type": "LOKR"})
    assert applies("lora_decompose_output_axis", {**base, "lora_decompose": True})
    oft = {**base, "peft_type": "OFT_2"}  # OFT v2: its block options, no rank or alpha
    assert all(applies(p, oft) and not applies(p, base) for p in ("oft_block_size", "oft_block_share", "oft_scaled"))
    assert not applies("lora_rank", oft) and not applies("lora_alpha", oft) and applies("dropout_probability", oft)

    config = page.on_page_load()[page.config_state]
    out = page.on_edit({**page.form_values(config), page.fields["multi_gpu"].component: True})
    assert out[page.fields["device_indexes"].component]["visible"] is True
    assert out[page.fields["lokr_dim"].component]["visible"] is False
    assert page.fields["device_indexes"].component in page.edit_outputs

    assert tab_order(["dropout_probability", "lora_rank", "lora_alpha"])[:2] == ["lora_rank", "lora_alpha"]
    lora_ids = [b._id for b in page.blocks.blocks.values() if getattr(b, "elem_id", "") in ("f-lora_rank", "f-dropout_probability")]
    assert lora_ids == sorted(lora_ids) and page.fields["lora_rank"].component._id < page.fields["dropout_probability"].component._id
    # the layer preset picks a LoRA's layers and a fine-tune's weights (as OneTrainer's Training tab)
    lora, fine_tune, embedding = ({**base, "training_method": m, "layer_filter_preset": "custom"} for m in ("LORA", "FINE_TUNE", "EMBEDDING"))
    assert all(applies(p, lora) and applies(p, fine_tune) and not applies(p, embedding) for p in ("layer_filter_preset", "layer_filter"))
    assert not applies("layer_filter", {**lora, "layer_filter_preset": "attn-mlp"})  # the filter is the custom preset's


def test_a_concept_path_the_system_refuses_is_a_missing_folder_not_a_traceback():
    from ot_gradio.runner.startcheck import concept_folder_problems

    problems = concept_folder_problems({"concepts": [{"path": "a" * 5000}, {"path": "x\x00y"}]})
    assert [p.split(":")[0] for p in problems] == ["concepts[0].path", "concepts[1].path"]
    assert all("does not exist" in p and len(p) < 300 for p in problems)


def test_the_base_model_field_names_the_offline_tiny_models():
    """The tiny models (`tiny:flux` ...) appeared nowhere in the page: the field's tooltip names
    some, each one that exists."""
    import re

    from ot_gradio.config.fields import iter_fields
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.models.tiny import all_tiny_models

    tooltip = next(f.tooltip for f in iter_fields(TrainConfig) if f.path == "base_model_name")
    named = re.findall(r"tiny:[a-z0-9.-]*[a-z0-9]", tooltip)
    assert len(named) >= 4 and set(named) <= set(all_tiny_models()), named


def test_output_galleries_take_no_upload_and_the_model_type_fits_a_phone(page):
    """Output-only galleries said "Drop Media Here / Click to Upload"; on a 390 px phone the
    model type read "STABLE_DIFFUSIC"."""
    import gradio as gr

    galleries = [b for b in page.blocks.blocks.values() if isinstance(b, gr.Gallery)]
    assert galleries and all(g.interactive is False for g in galleries)
    assert page.fields["model_type"].component.min_width >= 300
    import inspect

    from ot_gradio.ui import tools_automask, tools_captions, tools_sample  # built when a session opens them

    for module in (tools_automask, tools_captions, tools_sample):
        assert "gr.Gallery(interactive=False," in inspect.getsource(module), module.__name__
