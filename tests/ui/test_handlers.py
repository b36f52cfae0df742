"""The page's handlers called directly with what the page sends (no browser, no worker)."""

import json
import shutil
import warnings
from pathlib import Path

import gradio as gr
import pytest

from ot_gradio.runner.rundir import EventWriter, create_run
from ot_gradio.ui.page import Page
from ot_gradio.ui.state import UI_CONFIG, preset_config

ONETRAINER_FULL = Path(__file__).parents[1] / "config" / "data" / "onetrainer-full"


def shown_value(update):
    """The value a handler fills a field with (a field it also shows or hides gets an update)."""
    return update["value"] if isinstance(update, dict) else update


def set_field(page, values, path, value):
    values[page.fields[path].component] = value


def test_start_lists_every_problem_by_field_and_starts_nothing(page, fake_start):
    values = page.form_values(page.on_page_load()[page.config_state])
    set_field(page, values, "learning_rate", "abc")
    set_field(page, values, "epochs", 0)
    set_field(page, values, "resolution", "huge")
    values[page.concepts.fields["path"].component] = str(Path.cwd() / "no-such-folder")
    with pytest.warns(UserWarning, match="nothing was started"):
        out = page.on_start(values)
    problems = out[page.monitor.problems]
    # named by tab and label as on screen, not by config key (tests/ui/test_problems.py)
    for field in ("Training → Learning rate", "Training → Epochs", "Training → Resolution"):
        assert f"`{field}:" in problems, problems
    assert not fake_start and not (Path.cwd() / "workspace" / "demo" / "runs").exists()
    # fixing the typed values leaves the folder problem, named by concept
    set_field(page, values, "learning_rate", "0.001")
    set_field(page, values, "epochs", 3)
    set_field(page, values, "resolution", "64")
    with pytest.warns(UserWarning):
        problems = page.on_start(values)[page.monitor.problems]
    assert "`Concepts → Concept 1 'demo' → Folder: " in problems and "Learning rate" not in problems
    assert not fake_start


def test_start_uses_the_form_as_shown_and_a_second_start_is_refused(page, fake_start):
    values = page.form_values(page.on_page_load()[page.config_state])
    set_field(page, values, "learning_rate", "0.002")  # typed but its edit event not yet handled
    out = page.on_start(values)
    (run, config, _), = fake_start
    assert out[page.monitor.run_id] == str(run.path)
    assert config["learning_rate"] == 0.002
    assert json.loads(run.config.read_text())["learning_rate"] == 0.002
    with pytest.warns(UserWarning, match="already active"):
        second = page.on_start(values)  # said, not raised as an error (no traceback in the app's log)
    # nothing changes on screen; an empty dict would be one value for two outputs (gradio's error toast)
    assert list(second) == [page.monitor.problems] and isinstance(second[page.monitor.problems], type(gr.skip()))
    assert len(fake_start) == 1


def test_preset_load(page):
    out = page.on_preset("sd15-lora")
    config = out[page.config_state]
    expected = preset_config("sd15-lora", page.workspace)  # its workspace paths under the app's workspace
    assert {k: v for k, v in config.items() if k != "embedding"} == {k: v for k, v in expected.items() if k != "embedding"}
    assert out[page.fields["training_method"].component]["value"] == "LORA"  # with the choices SD 1.5 offers
    assert shown_value(out[page.fields["lora_rank"].component]) == config["lora_rank"]
    assert json.loads((page.workspace / UI_CONFIG).read_text()) == config  # kept for the next reload
    with pytest.raises(gr.Error):
        page.on_preset("")


def test_save_and_load_a_config_file(page, tmp_path):
    values = page.form_values(page.on_page_load()[page.config_state])
    set_field(page, values, "lora_rank", 7)
    config = page.on_edit(values)[page.config_state]
    path = tmp_path / "saved" / "mine.json"
    page.on_save(str(path), config)
    assert json.loads(path.read_text())["lora_rank"] == 7
    page.on_preset("demo")  # something else on screen
    out = page.on_load(f"  {path}  ")
    assert out[page.config_state]["lora_rank"] == 7
    assert shown_value(out[page.fields["lora_rank"].component]) == 7
    with pytest.raises(gr.Error, match="does not exist"):
        page.on_load(str(tmp_path / "nothing.json"))
    with pytest.raises(gr.Error, match="enter a path"):
        page.on_save("  ", config)
    bad = tmp_path / "bad.json"
    bad.write_text('{"learning_rate": ')
    with pytest.raises(gr.Error, match="bad.json"):
        page.on_load(str(bad))
    assert Path(page.on_export(config)).is_file()


def test_save_and_export_write_the_edits_still_on_their_way(page, tmp_path):
    """A value typed just before Save was missing from the file: Save read the session's config,
    which the edit's save had not reached yet."""
    (save,) = [fn for fn in page.blocks.fns.values() if fn.targets == [(page.save_btn._id, "click")]]
    (export,) = [fn for fn in page.blocks.fns.values() if fn.targets == [(page.export._id, "click")]]
    values = page.form_values(page.on_page_load()[page.config_state])
    values.update({page.edit_log: '[[1, "lora_rank", 11]]', page.edits_applied: 0, page.concepts.log: '[[1, "name", "cats", 0]]',
                   page.concepts.applied: 0, page.config_path: str(tmp_path / "mine.json")})
    save.fn(values)
    saved = json.loads((tmp_path / "mine.json").read_text())
    assert saved["lora_rank"] == 11 and saved["concepts"][0]["name"] == "cats"
    exported = json.loads(Path(export.fn(values)).read_text())
    assert exported["lora_rank"] == 11 and exported["concepts"][0]["name"] == "cats"
    assert {(fn.concurrency_id, fn.concurrency_limit) for fn in (save, export)} == {("config", 1)}  # in turn with the edits' saves


def test_onetrainer_import(page, tmp_path):
    folder = tmp_path / "ot"
    shutil.copytree(ONETRAINER_FULL, folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = page.on_upload(str(folder / "config.json"))
    config = out[page.config_state]
    assert config["training_method"] == "LORA" and config["learning_rate"] == 0.0003
    assert [c["name"] for c in config["concepts"]] == ["cat", "dog"]  # read from its concept file
    assert [s["prompt"] for s in config["samples"]] == ["a photo of a cat", "a cat on a sofa"]
    assert out[page.fields["learning_rate"].component] == "0.0003"
    assert any("cep_gamma" in str(w.message) for w in caught)  # options not acted on are named
    # the Preset box no longer names the preset the form held before (a first visit's demo), now or after a reload
    assert out[page.preset] is None and page.on_page_load()[page.preset] is None


def test_autosave_restores_the_form_after_a_reload_and_a_restart(page):
    values = page.form_values(page.on_page_load()[page.config_state])
    set_field(page, values, "learning_rate", "0.0042")
    set_field(page, values, "model_type", "STABLE_DIFFUSION_21")
    page.on_edit(values)
    config, index = page.concepts.add(page.on_page_load()[page.config_state], 0)
    reloaded = page.on_page_load()  # a page reload
    assert reloaded[page.fields["learning_rate"].component] == "0.0042"
    restarted = Page(page.workspace)  # an app restart
    out = restarted.on_page_load()
    assert out[restarted.fields["learning_rate"].component] == "0.0042"
    assert out[restarted.fields["model_type"].component] == "STABLE_DIFFUSION_21"
    assert len(out[restarted.config_state]["concepts"]) == 2
    restarted.tensorboard.stop()


def test_the_poll_returns_everything_so_a_skipped_tick_loses_nothing(page):
    run = create_run(page.workspace, {"tensorboard": False})
    writer = EventWriter(run)
    writer.status("training")
    for step in range(1, 6):
        writer.emit("metrics", global_step=step, loss=1.0 / step, lr=0.001)
    first = page.monitor.render(str(run.path))
    assert list(first[3]["step"][first[3]["series"] == "loss"]) == [1, 2, 3, 4, 5]
    # ticks skipped (a slow network, a hidden tab): the next one still has every event
    for step in range(6, 31):
        writer.emit("metrics", global_step=step, loss=1.0 / step, lr=0.001)
    writer.emit("progress", phase="training", epoch=1, epochs=2, step=30, steps_per_epoch=30, global_step=30, total_steps=60, it_s=2.0)
    writer.emit("sample", path=str(run.samples / "a.png"), prompt="a cat", step=30)
    writer.status("done")
    writer.close()
    run_id, status, progress, losses, lrs, gallery, _link, _log, _bar = page.monitor.render(str(run.path))
    assert list(losses["step"][losses["series"] == "loss"]) == list(range(1, 31))
    assert len(lrs) == 30 and "step 30/60" in progress and status.startswith("**done**")
    assert gallery[0][1].startswith("step 30")
    # a reload (no run id yet) reattaches to the newest run
    assert page.monitor.render("")[0] == str(run.path)


def test_concepts_add_clone_remove(page):
    config = page.on_page_load()[page.config_state]
    tab = page.concepts
    config, index = tab.add(config, 0)
    assert index == 1 and config["concepts"][1]["name"] == "concept 2"
    config["concepts"][0]["balancing"] = 3.0
    config, index = tab.add(config, 0, clone=True)
    assert index == 2 and config["concepts"][2]["name"] == "demo copy" and config["concepts"][2]["balancing"] == 3.0
    shown = tab.show(config, index)
    assert [label for label, _ in shown[tab.selector]["choices"]] == ["1. demo", "2. concept 2", "3. demo copy"]
    assert shown[tab.fields["name"].component] == "demo copy"
    config, index = tab.remove(config, 1)
    assert [c["name"] for c in config["concepts"]] == ["demo", "demo copy"] and index == 1
    config, index = tab.remove(config, 1)
    config, index = tab.remove(config, 0)
    assert config["concepts"] == [] and index is None
    assert json.loads((page.workspace / UI_CONFIG).read_text())["concepts"] == []  # autosaved
    # with none left, the fields (the last one's values, an edit of which belonged to no concept) give way to a note
    shown = tab.show(config, index)
    assert shown[tab.empty]["visible"] is True and all(shown[g]["visible"] is False for g in tab.groups)
    assert len(tab.groups) == 4 and set(tab.groups) <= set(tab.outputs)
    shown = tab.show(tab.add(config, None)[0], 0)
    assert shown[tab.empty]["visible"] is False and all(shown[g]["visible"] is True for g in tab.groups)


def test_the_problem_list_follows_the_edits_after_a_refused_start(page, fake_start):
    """The list of a refused Start stayed after the fix until the next Start."""
    (recheck,) = [fn for fn in page.blocks.fns.values() if getattr(fn.fn, "__func__", None) is Page.on_recheck]
    assert [event for _, event in recheck.targets] == ["change"] and recheck.outputs == [page.monitor.problems]
    values = page.form_values(page.on_page_load()[page.config_state])
    set_field(page, values, "batch_size", 0)
    set_field(page, values, "epochs", 0)
    with pytest.warns(UserWarning):
        shown = page.on_start(values)[page.monitor.problems]
    assert "Batch size" in shown and "Epochs" in shown
    set_field(page, values, "batch_size", 2)  # fixed: the edit handler saves it to the state
    config = page.on_edit(values)[page.config_state]
    shown = page.on_recheck(config, shown)
    assert "Batch size" not in shown and "Training → Epochs" in shown
    set_field(page, values, "epochs", 1)
    assert page.on_recheck(page.on_edit(values)[page.config_state], shown) == "**No problems left:** press **Start**."
    assert page.on_recheck(config, "") == gr.skip()  # no list on screen: nothing is checked
    assert not fake_start


def test_a_reload_keeps_the_preset_and_the_config_file(page, tmp_path):
    """A reload emptied the Preset and Config file fields of the top bar."""
    (load,) = [fn for fn in page.blocks.fns.values() if getattr(fn.fn, "__func__", None) is Page.on_page_load]
    assert {page.preset._id, page.config_path._id} <= {o._id for o in load.outputs}
    # a first visit: the form holds the demo preset, and the Preset field says so (it was blank)
    assert page.on_page_load()[page.preset] == "demo" and page.on_page_load()[page.config_path] == ""
    page.on_preset("demo")
    target = tmp_path / "workspace" / "configs" / "mine.json"
    page.on_save(f" {target} ", page.on_page_load()[page.config_state])
    shown = page.on_page_load()
    assert shown[page.preset] == "demo" and shown[page.config_path] == str(target)


def test_a_preset_keeps_the_concepts_and_samples_on_screen(page):
    """Loading a preset replaced all concepts without asking: a preset is settings; the user's
    concepts and sample prompts stay unless the preset brings its own (the demo does)."""
    current = page.on_page_load()[page.config_state]
    current["concepts"] = [{**current["concepts"][0], "name": "mycat", "path": "/data/cats"}]
    current["samples"] = [{**current["samples"][0], "prompt": "a photo of mycat"}] if current.get("samples") else []
    config = page.on_preset("sd15-lora", current)[page.config_state]
    assert [c["name"] for c in config["concepts"]] == ["mycat"] and config["concepts"][0]["path"] == "/data/cats"
    assert config["samples"] == current["samples"]
    assert config["lora_rank"] == preset_config("sd15-lora", page.workspace)["lora_rank"]
    assert [c["name"] for c in page.on_preset("demo", current)[page.config_state]["concepts"]] == ["demo"]


def test_a_preset_loads_once_per_choice(page):
    """Its Dropdown's input event fired twice per click on an option (two toasts) and again
    when Tab passed through it; select fires once, on a choice."""
    (handler,) = [fn for fn in page.blocks.fns.values() if getattr(fn.fn, "__func__", None) is Page.on_preset]
    assert handler.targets == [(page.preset._id, "select")]


def test_a_model_type_change_moves_only_a_default_base_model(page):
    from gradio.events import EventData

    from ot_gradio.ui.state import load_ui_config

    model_type, base = page.fields["model_type"].component, page.fields["base_model_name"].component
    config = {**page.on_page_load()[page.config_state], "model_type": "STABLE_DIFFUSION_15",
              "base_model_name": "stable-diffusion-v1-5/stable-diffusion-v1-5", "training_method": "LORA"}
    values = page.form_values(config)
    values[model_type] = "FLUX_DEV_1"
    out = page.on_edit(values, EventData(model_type, None))
    assert out[page.config_state]["base_model_name"] == "black-forest-labs/FLUX.1-dev" == shown_value(out[base])
    assert load_ui_config(page.workspace)["base_model_name"] == "black-forest-labs/FLUX.1-dev"
    for chosen in ("/models/my-finetune.safetensors", "tiny:sd15"):  # the user's own choice stays (the warning names a mismatch)
        values = page.form_values({**config, "base_model_name": chosen})
        values[model_type] = "FLUX_DEV_1"
        out = page.on_edit(values, EventData(model_type, None))
        assert out[page.config_state]["base_model_name"] == chosen and base not in out


def test_ai_toolkit_import(page, tmp_path):
    """Import file takes ai-toolkit's YAML job: the form shows its settings, the warning says how it was read."""
    from tests.config.test_aitoolkit_import import FLUX

    folder = tmp_path / "img"
    folder.mkdir()
    (tmp_path / "job.yaml").write_text(FLUX.replace("{folder}", str(folder)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = page.on_upload(str(tmp_path / "job.yaml"))
    config = out[page.config_state]
    assert (config["model_type"], config["lora_rank"], config["concepts"][0]["path"]) == ("FLUX_DEV_1", 16, str(folder))
    assert out[page.fields["learning_rate"].component] == "0.0001"
    assert any("read as ai-toolkit's job 'my_first_flux_lora_v1'" in str(w.message) for w in caught)


def test_the_control_image_folder_shows_for_image_editing_models_only(page):
    """The Concepts tab's Control image folder follows the model type, on an edit and when a concept is shown."""
    field = page.concepts.fields["image.control_folder"].component
    config = page.on_page_load()[page.config_state]
    assert page.visibility({**config, "model_type": "QWEN_IMAGE_EDIT"})[field]["visible"] is True
    assert page.visibility({**config, "model_type": "FLUX_DEV_1"})[field]["visible"] is False
    edit = {**config, "model_type": "QWEN_IMAGE_EDIT", "concepts": [{"name": "pairs", "path": "/d", "image": {"control_folder": "/s"}}]}
    shown = page.concepts.show(edit, 0)[field]
    assert (shown["visible"], shown["value"]) == (True, "/s")
    assert page.form_values(edit)[field] == "/s"  # the value a handler gets, not the update


def test_a_diffusion_pipe_config_by_its_path_finds_its_dataset(page, tmp_path):
    """*Config file* with a diffusion-pipe config in a checkout's examples/: its dataset TOML and
    folders are read from the checkout's root, as diffusion-pipe runs there."""
    from tests.config.test_dpipe_import import DATASET, MAIN_EXAMPLE

    (tmp_path / "examples").mkdir()
    (tmp_path / "data" / "cats").mkdir(parents=True)
    (tmp_path / "examples" / "dataset.toml").write_text(DATASET)
    (tmp_path / "examples" / "hv.toml").write_text(MAIN_EXAMPLE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = page.on_load(str(tmp_path / "examples" / "hv.toml"))
    config = out[page.config_state]
    assert config["model_type"] == "HUNYUAN_VIDEO" and config["concepts"][0]["path"] == str(tmp_path / "data" / "cats")
    assert any("read as diffusion-pipe trains it" in str(w.message) for w in caught)


def test_a_preset_loaded_over_the_demo_leaves_the_demos_concept_and_sample_out(page):
    """The page opens on the demo; loading a real preset must not train the demo's shapes into the user's LoRA."""
    demo = page.on_page_load()[page.config_state]
    assert demo["concepts"] and demo["samples"]
    mine = {"name": "cat", "path": str(page.workspace / "datasets" / "cat")}
    config = page.on_preset("sd15-lora", {**demo, "concepts": [*demo["concepts"], mine]})[page.config_state]
    assert [c["path"] for c in config["concepts"]] == [mine["path"]]  # the user's concept stays
    assert config["samples"] == []
    assert page.on_preset("demo", config)[page.config_state]["concepts"]  # the demo itself brings its own
