"""Every handler of the page that takes a path goes through the one check (paths.check): config
load, save and import, presets, the file browser and the tools' path fields refuse paths outside
the page's folders and symlinks leading out, with a message naming the path and the folders.
The folders are fixed at start-up: a concept folder typed in the page opens nothing, and hidden
files and folders inside them (a home folder's .docker, .config, .ssh) are never used."""

import json
import os
import warnings
from pathlib import Path

import gradio as gr
import pytest

from ot_gradio.ui.tools_tab import ToolInputError, ToolsContext


@pytest.fixture
def outside(tmp_path_factory):
    """A folder outside every root of the page (the page's roots are its tmp_path), holding a
    config file and a 'dotfile' a Save must never overwrite."""
    folder = tmp_path_factory.mktemp("outside")
    (folder / "config.json").write_text(json.dumps({"learning_rate": 0.5}))
    (folder / ".bashrc").write_text("echo hi\n")
    return folder


@pytest.fixture
def links(page, tmp_path, outside):
    """Symlinks inside the workspace pointing out: to the outside folder, to its config file, and
    to a file name not yet written there."""
    ws = page.workspace
    os.symlink(outside, ws / "out-dir")
    os.symlink(outside / "config.json", ws / "out-config.json")
    os.symlink(outside / "new.json", ws / "dangling.json")
    return ws


def bad_paths(outside: Path, ws: Path) -> list[str]:
    return [str(outside / "config.json"), str(ws / "out-config.json"), str(ws / "out-dir" / "config.json"),
            str(ws / ".." / ".." / outside.name / "config.json"), "/etc/passwd", "~/x.json", "../../x.json"]


def refused(err, path_text: str | None = None) -> None:
    message = str(err.value)
    assert "outside the folders this page may use" in message or "not a usable path" in message, message
    if path_text is not None:
        assert path_text in message


def test_load_refuses_paths_outside_and_symlinks_out(page, outside, links):
    config = page.on_page_load()[page.config_state]
    for path in bad_paths(outside, links):
        with pytest.raises(gr.Error) as err:
            page.on_load(path, config)
        refused(err, path)
        assert str(page.workspace.resolve()) in str(err.value)  # names the allowed folders
    with pytest.raises(gr.Error) as err:
        page.on_load("x\0.json", config)
    refused(err)


def test_load_reads_inside_and_follows_symlinks_that_stay_inside(page, tmp_path):
    config = page.on_page_load()[page.config_state]
    saved = page.workspace / "configs" / "mine.json"
    page.on_save(str(saved), {**config, "learning_rate": 0.0123})
    os.symlink(saved, page.workspace / "alias.json")
    assert page.on_load(str(page.workspace / "alias.json"), config)[page.config_state]["learning_rate"] == 0.0123


def test_save_refuses_outside_symlinks_out_dotfiles_and_non_json(page, outside, links):
    config = page.on_page_load()[page.config_state]
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    targets = [*bad_paths(outside, links), str(links / "dangling.json"), str(outside / ".bashrc")]
    for path in targets:
        with pytest.raises(gr.Error) as err:
            page.on_save(path, config)
        refused(err)
    for path in (str(page.workspace / "run.sh"), str(page.workspace)):
        with pytest.raises(gr.Error, match=r"must name a \.json file"):
            page.on_save(path, config)
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before  # nothing written outside
    assert not (page.workspace / ".bashrc").exists()


def test_a_concept_folder_opens_nothing_to_the_page(page, outside):
    """A concept folder is read by training; typed in the page (here: a folder outside every root,
    and /etc) it is not listed, read, written nor served."""
    folder = outside
    config = page.on_page_load()[page.config_state]
    etc = {**config, "concepts": [{**config["concepts"][0], "path": "/etc"}]}
    assert "Refused" in next(iter(page.browser.browsers.values())).go("/etc", etc)[page.browser.message]
    config = {**config, "concepts": [{**config["concepts"][0], "path": str(folder)}]}
    assert page.roots(config) == page.roots()
    browser = next(iter(page.browser.browsers.values()))
    message = browser.go(str(folder), config)[page.browser.message]
    assert "Refused" in message and "--browse-root FOLDER" in message
    assert browser.open(str(folder), config)[page.browser.folder] == ""  # Browse opens at the roots
    with pytest.raises(gr.Error) as err:
        page.on_load(str(folder / "config.json"), config)
    refused(err)
    with pytest.raises(gr.Error) as err:
        page.on_save(str(folder / "saved.json"), config)
    refused(err)
    ctx = ToolsContext(page.workspace, page.jobs, page.config_state, page.roots)
    for use in (ctx.folder, ctx.output):
        with pytest.raises(ToolInputError, match="outside the folders this page may use"):
            use("Output", str(folder / "merged.safetensors") if use == ctx.output else str(folder), config)
    assert not (folder / "saved.json").exists()
    from ot_gradio.ui.launch import served_paths
    from ot_gradio.ui.state import save_ui_config

    save_ui_config(page.workspace, config)  # then a restart: what gradio serves
    assert served_paths(page.workspace) == [str(page.workspace.resolve())]


def test_hidden_folders_of_the_start_folder_are_never_written_or_read(page, tmp_path):
    """Started in a home folder: Save, Load, the tools and the browser leave its hidden folders
    (.docker, .config) and the workspace's secrets file alone."""
    config = page.on_page_load()[page.config_state]
    docker, settings = tmp_path / ".docker" / "config.json", tmp_path / ".config" / "app" / "settings.json"
    for file in (docker, settings):
        file.parent.mkdir(parents=True)
        file.write_text('{"auths": {}}')
    (page.workspace / "secrets.json").write_text('{"huggingface_token": "hf_x"}')
    for path in (docker, settings, tmp_path / ".config" / "new.json", page.workspace / "secrets.json"):
        with pytest.raises(gr.Error, match="hidden or secret"):
            page.on_save(str(path), config)
        with pytest.raises(gr.Error, match="hidden or secret"):
            page.on_load(str(path), config)
    assert docker.read_text() == settings.read_text() == '{"auths": {}}'
    assert not (tmp_path / ".config" / "new.json").exists()
    ctx = ToolsContext(page.workspace, page.jobs, page.config_state, page.roots)
    with pytest.raises(ToolInputError, match="hidden or secret"):
        ctx.output("Output", str(tmp_path / ".config" / "x.safetensors"), config)
    browser = next(iter(page.browser.browsers.values()))
    assert "Refused" in browser.go(str(tmp_path / ".config"), config)[page.browser.message]
    page.on_save(str(tmp_path / "configs.json"), config)  # the start folder itself is still usable
    assert (tmp_path / "configs.json").is_file()


def test_import_reads_only_uploads_and_the_page_folders(page, outside, links, monkeypatch, tmp_path_factory):
    uploads = tmp_path_factory.mktemp("gradio-uploads")
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))
    for path in bad_paths(outside, links):
        with pytest.raises(gr.Error) as err:
            page.on_upload(path)
        refused(err)
    os.symlink(outside / "config.json", uploads / "evil.json")
    with pytest.raises(gr.Error) as err:
        page.on_upload(str(uploads / "evil.json"))
    refused(err)
    (uploads / "abc").mkdir()
    (uploads / "abc" / "config.json").write_text(json.dumps({"learning_rate": 0.25}))
    assert page.on_upload(str(uploads / "abc" / "config.json"))[page.config_state]["learning_rate"] == 0.25


def test_presets_are_read_from_the_presets_folder_only(page, outside):
    for name in (str(outside / "config.json"), "../tests/conftest", "/etc/passwd"):
        with pytest.raises(gr.Error):
            page.on_preset(name)
    assert page.on_preset("demo")[page.config_state]["model_type"]


def test_file_browser_handlers_refuse_outside_and_symlinks_out(page, outside, links):
    config = page.on_page_load()[page.config_state]
    browser = next(iter(page.browser.browsers.values()))
    for path in bad_paths(outside, links):
        for out in (browser.go(path, config), browser.pick(path, str(links), config), browser.go_up(path, config),
                    browser.use_it(path, None, "", config), browser.use_it(str(links), path, "", config)):
            message = out[page.browser.message]
            assert "Refused" in message, (path, message)
            assert browser.field not in out  # nothing written into the field


def test_tool_path_fields_refuse_outside_and_symlinks_out(page, outside, links):
    config = page.on_page_load()[page.config_state]
    ctx = ToolsContext(page.workspace, page.jobs, page.config_state, page.roots)
    for path in bad_paths(outside, links):
        for use in (ctx.path, ctx.folder, ctx.file, ctx.output):
            with pytest.raises(ToolInputError, match="Folder: .*outside the folders this page may use"):
                use("Folder", path, config)
    assert ctx.folder("Folder", str(page.workspace), config) == page.workspace.resolve()


def test_an_imported_config_reads_no_file_and_lists_no_folder_outside_the_page_folders(page, outside, monkeypatch, tmp_path_factory):
    """A OneTrainer config's concepts file, and a kohya_ss config's dataset folder, outside the
    page's folders are not read or listed (a concepts file's lines would show in the page or in
    its error message); inside them they are, as from the command line."""
    uploads = tmp_path_factory.mktemp("gradio-uploads")
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))
    (outside / "concepts.json").write_text(json.dumps(["s3cr3t", {"name": "x", "path": str(outside)}]))
    (outside / "data" / "40_secret name").mkdir(parents=True)
    (uploads / "a").mkdir()
    ot = uploads / "a" / "ot.json"
    ot.write_text(json.dumps({"__version": 11, "training_method": "LORA", "concept_file_name": str(outside / "concepts.json")}))
    kohya = uploads / "a" / "kohya.json"
    kohya.write_text(json.dumps({"pretrained_model_name_or_path": "x", "network_dim": 4, "train_data_dir": str(outside / "data")}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = page.on_upload(str(ot))[page.config_state]
        assert config["concepts"] == [] or all(c["path"] != str(outside) for c in config["concepts"])
        config = page.on_upload(str(kohya))[page.config_state]
    assert [c["name"] for c in config["concepts"]] == ["data"]  # the folder itself, its subfolders unlisted
    said = " ".join(str(w.message) for w in caught)
    assert "is outside the folders this page may read" in said and "is outside the folders this page may list" in said
    assert "s3cr3t" not in said and "secret name" not in said
    (uploads / "a" / "concepts.json").write_text(json.dumps([{"name": "inside", "path": str(uploads)}]))
    ot.write_text(json.dumps({"__version": 11, "training_method": "LORA", "concept_file_name": "concepts.json"}))
    assert [c["name"] for c in page.on_upload(str(ot))[page.config_state]["concepts"]] == ["inside"]
