"""The in-page file browser of the path fields, through its handlers as the page calls them."""

import os

import pytest

from ot_gradio.ui.browser import ANY, DIR, FILE, SAVE, path_kind


def choices(out, browser):
    return [value for _, value in out[browser.entries]["choices"]]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "base.safetensors").write_bytes(b"x")
    (tmp_path / "data" / "cats").mkdir(parents=True)
    (tmp_path / "data" / "cats" / "a.png").write_bytes(b"x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "secret.safetensors").write_bytes(b"x")
    os.symlink(outside, tmp_path / "models" / "escape")
    return tmp_path, outside


def test_every_path_field_of_the_page_has_a_browser(page):
    with_browser = {p for p, f in page.fields.items() if f.browser is not None}
    assert {"base_model_name", "output_model_destination", "workspace_dir", "cache_dir", "lora_model_name"} <= with_browser
    assert page.concepts.fields["path"].browser is not None
    assert page.concepts.fields["text.prompt_path"].browser is not None
    assert page.concepts.fields["text.captions_file"].browser is not None
    assert all(path_kind(p) for p in with_browser)
    assert page.fields["learning_rate"].browser is None


def test_path_kinds():
    assert path_kind("concepts[].path") == DIR
    assert path_kind("lora_model_name") == FILE
    assert path_kind("base_model_name") == ANY
    assert path_kind("output_model_destination") == SAVE
    assert path_kind("vae.model_name") == ANY  # a part loaded from another model
    assert path_kind("learning_rate") is None


def test_browse_walk_and_pick_a_file(page, files):
    root, _ = files
    browser = page.fields["base_model_name"].browser
    config = page.on_page_load()[page.config_state]
    out = browser.open("/etc/hostname", config)  # a value outside: start at the list of roots
    assert out[browser.group]["open"] is True and out[browser.folder] == ""
    assert out[browser.panel.target] == "f-base_model_name" and "Base model" in out[browser.panel.title]
    assert str(root.resolve()) in choices(out, browser)
    out = browser.open("stable-diffusion-v1-5/stable-diffusion-v1-5", config)  # a hub id: the app's folder
    assert out[browser.folder] == str(root.resolve())
    out = browser.pick(str(root / "models"), "", config)  # a folder opens
    assert out[browser.folder] == str((root / "models").resolve())
    assert choices(out, browser) == [str((root / "models" / "base.safetensors").resolve())]  # the symlink out is not listed
    model = str((root / "models" / "base.safetensors").resolve())
    assert "Use this" in browser.pick(model, out[browser.folder], config)[browser.message]
    done = browser.use_it(out[browser.folder], model, "", config)
    assert done[browser.field] == model and done[browser.group]["open"] is False


def test_requests_outside_the_roots_are_refused(page, files):
    root, outside = files
    browser = page.fields["base_model_name"].browser
    config = page.on_page_load()[page.config_state]
    for typed in ("/etc", str(outside), str(root / ".."), str(root / "models" / "escape"), "../"):
        out = browser.go(typed, config)
        assert out[browser.message].startswith("**Refused:**"), typed
        assert out[browser.folder] == ""  # back at the list of roots
    # a value the page never offered (a forged request) is checked the same way
    assert browser.pick(str(outside), "", config)[browser.message].startswith("**Refused:**")
    assert browser.pick(str(root / "models" / "escape"), "", config)[browser.message].startswith("**Refused:**")
    out = browser.use_it(str(root / "models"), str(outside / "secret.safetensors"), "", config)
    assert browser.field not in out and "outside" in out[browser.message]
    assert browser.use_it(str(outside), None, "", config)[browser.message].startswith("**Refused:**")
    assert browser.go_up("/", config)[browser.message].startswith("**Refused:**")


def test_up_stops_at_the_roots(page, files):
    root, _ = files
    browser = page.fields["workspace_dir"].browser
    config = page.on_page_load()[page.config_state]
    out = browser.go_up(str(root / "data" / "cats"), config)
    assert out[browser.folder] == str((root / "data").resolve())
    out = browser.go_up(str(root), config)
    assert out[browser.folder] == ""  # the list of roots


def test_folder_fields_show_the_files_but_take_the_open_folder(page, files):
    """A folder of images is not "(empty folder)": its files are listed, marked, and choosing
    one keeps the folder."""
    root, _ = files
    browser = page.concepts.fields["path"].browser
    config = page.on_page_load()[page.config_state]
    out = browser.go(str(root / "data"), config)
    assert choices(out, browser) == [str((root / "data" / "cats").resolve())]
    out = browser.pick(str(root / "data" / "cats"), out[browser.folder], config)
    image = str((root / "data" / "cats" / "a.png").resolve())
    assert out[browser.entries]["choices"] == [("  · a.png (file)", image)]
    assert "empty" not in out[browser.message] and "1 file(s) here" in out[browser.message]
    assert "is a file: this field takes a folder" in browser.pick(image, out[browser.folder], config)[browser.message]
    assert browser.use_it(out[browser.folder], image, "", config)[browser.field] == str((root / "data" / "cats").resolve())
    assert browser.use_it(out[browser.folder], None, "", config)[browser.field] == str((root / "data" / "cats").resolve())
    assert browser.use_it("", None, "", config)[browser.message] == "**Refused:** open a folder first"


def test_a_cleared_choice_answers_every_output(page, files):
    """Clearing the Contents box sent no selection: the handler returned {}, which gradio reads
    as one value for four outputs and shows as an internal error toast beside the panel."""
    config = page.on_page_load()[page.config_state]
    panel = page.browser
    for selected in (None, ""):
        out = panel.for_target("concept-concepts-path", lambda b, s=selected: b.pick(s, "", config))
        assert isinstance(out, dict) and out and set(out) <= {panel.sidebar, panel.folder, panel.entries, panel.message}


def test_file_fields_need_a_file_and_save_fields_keep_the_file_name(page, files):
    root, _ = files
    config = page.on_page_load()[page.config_state]
    lora = page.fields["lora_model_name"].browser
    assert "choose a file" in lora.use_it(str(root / "models"), None, "", config)[lora.message]
    save = page.fields["output_model_destination"].browser
    out = save.use_it(str(root / "models"), None, "somewhere/else/my-lora.safetensors", config)
    assert out[save.field] == str((root / "models" / "my-lora.safetensors").resolve())


def test_a_concept_folder_is_no_root_and_a_pick_reaches_the_config(page, tmp_path):
    elsewhere = tmp_path.parent / f"{tmp_path.name}-dataset"
    (elsewhere / "more").mkdir(parents=True)
    config = page.on_page_load()[page.config_state]
    browser = page.concepts.fields["path"].browser
    config["concepts"][0]["path"] = str(elsewhere)  # typed: training reads it, the browser stays in its roots
    assert "--browse-root" in browser.go(str(elsewhere), config)[browser.message]
    dataset = tmp_path / "dataset"  # in the folder the app was started in
    (dataset / "more").mkdir(parents=True)
    out = browser.go(str(dataset), config)
    assert out[browser.message] == "" and choices(out, browser) == [str((dataset / "more").resolve())]
    picked = browser.use_it(str(dataset / "more"), None, "", config)[browser.field]
    # the page then runs the concept's edit handler with the field's new value
    values = page.form_values(config)
    values[page.concepts.fields["path"].component] = picked
    edited = page.concepts.edit(config, 0, values)
    assert edited["concepts"][0]["path"] == picked
    assert page.on_page_load()[page.config_state]["concepts"][0]["path"] == picked  # autosaved
