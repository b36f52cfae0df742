"""The hub token typed on the page (General → Hugging Face token): kept in the workspace's
owner-only secrets.json, never in the autosaved config; never sent back to the browser (its field
comes empty and says a token is stored; left empty, the token stays; '-' removes it); and given to
the runs the page starts, in their own workspace too (the worker reads the token from its run's
workspace). Before, the page autosaved it into ui-config.json and Start dropped it: a gated model
never loaded."""

import json
import stat
import subprocess
import sys

from ot_gradio.runner import supervisor as supervisor_module
from ot_gradio.secrets import read_secrets, secrets_path
from ot_gradio.ui.page import TOKEN_STORED
from ot_gradio.ui.state import UI_CONFIG

TOKEN = "hf_PAGETOKEN1234567890"


def test_the_page_token_is_stored_apart_masked_and_reaches_the_run(page, tmp_path, monkeypatch):
    field = page.fields["secrets.huggingface_token"].component
    assert field.type == "password"
    config = page.on_page_load()[page.config_state]
    out = page.on_edit_log({page.config_state: config, page.edit_log: json.dumps([[1, "secrets.huggingface_token", TOKEN]]),
                            page.edits_applied: 0})
    assert TOKEN not in (page.workspace / UI_CONFIG).read_text()
    assert read_secrets(page.workspace) == {"huggingface_token": TOKEN}
    assert stat.S_IMODE(secrets_path(page.workspace).stat().st_mode) == 0o600
    reloaded = page.on_page_load()  # a reload never sends it: an empty field that says one is stored
    assert reloaded[field] == {"__type__": "update", "value": "", "placeholder": TOKEN_STORED}
    assert TOKEN not in repr(reloaded)
    # a preset (configs never carry the token): the field left empty keeps it, saved or not
    loaded = page.on_preset("demo")
    assert TOKEN not in repr(loaded) and loaded[field]["placeholder"] == TOKEN_STORED
    page.on_edit_log({page.config_state: loaded[page.config_state], page.edit_log: json.dumps([[1, "learning_rate", "0.5"]]),
                      page.edits_applied: 0})
    assert read_secrets(page.workspace) == {"huggingface_token": TOKEN}
    out = {page.config_state: loaded[page.config_state]}

    # Start, the run in a workspace of its own: its worker finds the token there, and no run file holds it
    started = []

    def child(command, log, env=None):
        started.append(command)
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    monkeypatch.setattr(supervisor_module, "start_child", child)
    elsewhere = tmp_path / "elsewhere"
    values = page.form_values({**out[page.config_state], "workspace_dir": str(elsewhere)})
    try:
        run_id = page.on_start(values)[page.monitor.run_id]
        assert started and read_secrets(elsewhere) == {"huggingface_token": TOKEN}
        assert not any(TOKEN.encode() in p.read_bytes() for p in elsewhere.rglob("*") if p.is_file() and p.name != "secrets.json")
        assert str(elsewhere) in run_id
    finally:
        for proc in page.supervisor._procs.values():
            proc.kill()


def test_a_token_typed_just_before_start_is_stored_and_a_dash_removes_it(page):
    config = page.on_page_load()[page.config_state]
    values = page.form_values(config)
    values.update({page.edit_log: json.dumps([[1, "secrets.huggingface_token", TOKEN]]), page.edits_applied: 0})
    page._config_of(values)  # what Start, Add to queue, Save and Export read: the edit still on its way
    assert read_secrets(page.workspace) == {"huggingface_token": TOKEN}
    # the form as a reload shows it (the field empty): Start uses the stored token and keeps it
    config = page.on_page_load()[page.config_state]
    assert "secrets" not in page._config_of(page.form_values(config)) and read_secrets(page.workspace) == {"huggingface_token": TOKEN}
    page.on_edit_log({page.config_state: config, page.edit_log: json.dumps([[1, "secrets.huggingface_token", ""]]), page.edits_applied: 0})
    assert read_secrets(page.workspace) == {"huggingface_token": TOKEN}
    out = page.on_edit_log({page.config_state: config, page.edit_log: json.dumps([[1, "secrets.huggingface_token", " - "]]),
                            page.edits_applied: 0})
    assert read_secrets(page.workspace) == {}
    assert page.on_page_load()[page.fields["secrets.huggingface_token"].component]["placeholder"] == ""
    # done once: the field empties and the session forgets the '-', so a token stored later (the
    # command line, the HTTP API) is not removed by the page's next save
    field = page.fields["secrets.huggingface_token"].component
    assert out[field]["value"] == "" and out[page.config_state]["secrets"]["huggingface_token"] == ""
    from ot_gradio.secrets import write_secrets

    write_secrets(page.workspace, huggingface_token=TOKEN)
    page.on_edit_log({page.config_state: out[page.config_state], page.edit_log: json.dumps([[1, "learning_rate", "0.5"]]),
                      page.edits_applied: 0})
    assert read_secrets(page.workspace) == {"huggingface_token": TOKEN}


def test_stored_tokens_are_never_sent_to_the_page(page):
    """The security review read both stored tokens out of the page load's answer (a password
    field only masks them on screen): every handler that fills the form in sends none."""
    from ot_gradio.secrets import write_secrets

    key = "civitai0123456789abcdef"
    write_secrets(page.workspace, huggingface_token=TOKEN, civitai_token=key)
    config = page.on_page_load()[page.config_state]
    answers = [page.on_page_load(), page.on_preset("demo"), page.loaded(config), page.populate({**config, "secrets": {"civitai_token": key}})]
    for answer in answers:
        assert TOKEN not in repr(answer) and key not in repr(answer)
        for name in ("huggingface_token", "civitai_token"):
            assert answer[page.fields[f"secrets.{name}"].component]["placeholder"] == TOKEN_STORED
    assert read_secrets(page.workspace) == {"huggingface_token": TOKEN, "civitai_token": key}
    # nor written into a config file: Save and Export (a download) hold no token
    values = page.form_values(config)
    page.on_save(str(page.workspace / "configs" / "mine.json"), page._config_of(values))
    exported = page.on_export(page._config_of(values))
    for path in (page.workspace / "configs" / "mine.json", exported):
        text = open(path).read()
        assert TOKEN not in text and key not in text


def test_a_token_an_older_version_autosaved_moves_out_of_the_config(tmp_path):
    from ot_gradio.ui.state import load_ui_config

    (tmp_path / UI_CONFIG).write_text(json.dumps({"learning_rate": 0.002, "secrets": {"huggingface_token": TOKEN}}))
    assert load_ui_config(tmp_path)["learning_rate"] == 0.002
    assert TOKEN not in (tmp_path / UI_CONFIG).read_text() and read_secrets(tmp_path) == {"huggingface_token": TOKEN}


def test_the_civitai_key_is_kept_beside_the_hub_token(page):
    """General → Civitai API key (for a base model on Civitai) is kept as the hub token is: masked,
    in secrets.json only, on the form after a reload or a preset, and set or cleared on its own."""
    key = "0123456789abcdef0123456789abcdef"
    assert page.fields["secrets.civitai_token"].component.type == "password"
    config = page.on_page_load()[page.config_state]
    edits = [[1, "secrets.huggingface_token", TOKEN], [2, "secrets.civitai_token", key]]
    page.on_edit_log({page.config_state: config, page.edit_log: json.dumps(edits), page.edits_applied: 0})
    assert read_secrets(page.workspace) == {"huggingface_token": TOKEN, "civitai_token": key}
    assert key not in (page.workspace / UI_CONFIG).read_text()
    loaded = page.on_preset("demo")
    assert key not in repr(loaded) and read_secrets(page.workspace) == {"huggingface_token": TOKEN, "civitai_token": key}
    config = page.on_page_load()[page.config_state]
    page.on_edit_log({page.config_state: config, page.edit_log: json.dumps([[1, "secrets.civitai_token", "-"]]), page.edits_applied: 0})
    assert read_secrets(page.workspace) == {"huggingface_token": TOKEN}
