"""The page's Start refuses what `validate` and `train` refuse before the first step (the same
runner/startcheck.py), naming the field, and starts nothing; the CLI's `--set` cases too."""

import json
from pathlib import Path

import pytest

from ot_gradio.cli import main as cli_main
from ot_gradio.ui.problems import on_screen

CASES = [  # (field, value, what the refusal says)
    ("base_model_name", "", "base_model_name: empty"),
    ("base_model_name", "models/none.safetensors", "base_model_name: models/none.safetensors does not exist"),
    ("layer_filter_preset", "nope", "layer_filter_preset: 'nope' is not a layer preset"),
    ("output_model_destination", f"out/{'n' * 300}.safetensors", "output_model_destination: the file name"),
    ("cache_dir", "cache\0x", "cache_dir: contains a NUL character"),
]


@pytest.mark.parametrize(("field", "value", "message"), CASES, ids=[c[0] + str(i) for i, c in enumerate(CASES)])
def test_start_refuses_what_train_refuses(page, fake_start, field, value, message):
    values = page.form_values(page.on_page_load()[page.config_state])
    values[page.fields[field].component] = value
    with pytest.warns(UserWarning, match="nothing was started"):
        problems = page.on_start(values)[page.monitor.problems]
    if "\0" in value:  # (the page's own path check refuses it first: "not a usable path (embedded null byte)")
        message = f"{field}: {value!r} is not a usable path"
    assert on_screen(message) in problems and not fake_start  # by tab and label (tests/ui/test_problems.py)


def test_start_still_starts_a_good_config(page, fake_start):
    values = page.form_values(page.on_page_load()[page.config_state])
    page.on_start(values)
    assert len(fake_start) == 1


@pytest.mark.parametrize(("field", "value", "message"), [c for c in CASES if "\0" not in c[1]])
def test_cli_set_cases_are_refused_in_one_line_by_validate_and_train(tmp_path, monkeypatch, capsys, field, value, message):
    monkeypatch.chdir(tmp_path)
    for command in ("validate", "train"):
        assert cli_main([command, "--config", "demo", "--set", f"{field}={value}"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
        assert [line for line in err.splitlines() if line.startswith("error:")] == [next(
            line for line in err.splitlines() if message in line)]
    assert not (Path(tmp_path) / "workspace" / "demo" / "runs").exists()


def test_the_page_writes_reads_and_runs_only_what_it_may(page, fake_start, tmp_path):
    """Through a share link the page is the way in: a config from it saves only inside the
    folders the page may use, reads the text files a run copies into its folder (debug mode
    writes every caption) only from there, and names no CUSTOM scheduler that would import and
    run another module's code (torch.hub.load runs any repository's hubconf.py). The command
    line on the machine takes all of them."""
    from ot_gradio.ui.page_limits import page_problems

    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere"  # beside the page's roots ([tmp_path])
    outside.mkdir()
    (outside / "notes.txt").write_text("SECRET-LINE\n")
    (tmp_path / "workspace" / "secrets.json").write_text("{}")
    base = page.form_values(page.on_page_load()[page.config_state])
    config = page._config_of(base)
    cases = [
        ({"output_model_destination": str(outside / "site-packages" / "evil.pth")}, "output_model_destination: "),
        ({"cache_dir": str(outside / "cache")}, "cache_dir: "),
        ({"debug_mode": True, "debug_dir": str(outside / "debug")}, "debug_dir: "),
        ({"learning_rate_scheduler": "CUSTOM", "custom_learning_rate_scheduler": "torch.hub.load"},
         "custom_learning_rate_scheduler: torch.hub.load is not a scheduler of torch.optim.lr_scheduler"),
        ({"learning_rate_scheduler": "CUSTOM", "custom_learning_rate_scheduler": "transformers.pipeline"},  # (trust_remote_code)
         "custom_learning_rate_scheduler: transformers.pipeline is not a scheduler of torch.optim.lr_scheduler"),
        ({"save_filename_prefix": "../../elsewhere/"}, "save_filename_prefix: "),
        ({"quantization": {**config["quantization"], "cache_dir": str(outside / "svd")}}, "quantization.cache_dir: "),
        ({"huggingface_cache_dir": str(outside / "hf")}, "huggingface_cache_dir: "),
        ({"concepts": [{**config["concepts"][0], "text": {"prompt_source": "concept", "prompt_path": str(outside / "notes.txt")}}]},
         "concepts[0].text.prompt_path: "),
        ({"concepts": [{**config["concepts"][0], "text": {"prompt_source": "concept",
                                                          "prompt_path": str(tmp_path / "workspace" / "secrets.json")}}]},
         "the page does not use hidden or secret files"),
        ({"concepts": [{**config["concepts"][0], "text": {"tag_dropout_special_tags": str(outside / "notes.txt")}}]},
         "concepts[0].text.tag_dropout_special_tags: "),
        ({"concepts": [{**config["concepts"][0], "text": {"captions_file": str(outside / "notes.txt")}}]},
         "concepts[0].text.captions_file: "),
        ({"samples": [{"prompt": "x", "control_image": str(outside / "photo.png")}]}, "samples[0].control_image: "),
        ({"debug_mode": True, "concepts": [{**config["concepts"][0], "path": str(outside)}]},
         "concepts[0].path: with debug mode on (it writes the images it trains on beside the run)"),
    ]
    for change, message in cases:
        valid, problems, _ = page.validate({**config, **change})
        assert any(message in p for p in problems), (change, problems)
        if "secret" not in message and "CUSTOM" not in str(change):  # a path: taken where --browse-root opens its folder
            assert page_problems(valid, [outside, tmp_path]) == [], change
    assert not [p for p in page.validate({**config, "concepts": [{**config["concepts"][0], "path": str(outside)}]})[1]
                if p.startswith("concepts[0].path: with debug")]  # a concept elsewhere trains (its images are not served)
    fine = {"learning_rate_scheduler": "CUSTOM", "custom_learning_rate_scheduler": "torch.optim.lr_scheduler.StepLR",
            "scheduler_params": [{"key": "step_size", "value": "10"}]}
    assert page.validate({**config, **fine})[1] == []
    with pytest.warns(UserWarning, match="nothing was started"):
        page.on_start({**base, page.fields["output_model_destination"].component: str(outside / "x.safetensors")})
    assert not fake_start


def test_the_http_apis_config_reads_no_file_outside_the_page_folders(page, tmp_path):
    """A OneTrainer config sent to `queue_config` names its concepts file: outside the page's
    folders it is not read, so its lines never come back in the answer."""
    from ot_gradio.ui.api import QueueApi

    outside = tmp_path.parent / f"{tmp_path.name}-api-elsewhere"
    outside.mkdir()
    (outside / "list.json").write_text(json.dumps(["s3cr3t-token"]))
    api = QueueApi(page.queue, page.supervisor, page.validate)
    answer = api.queue_config(json.dumps({"__version": 11, "training_method": "LORA", "concept_file_name": str(outside / "list.json")}))
    assert "s3cr3t" not in json.dumps(answer)
    _valid, _problems, warnings = page.validate({"__version": 11, "concept_file_name": str(outside / "list.json")})
    assert any("is outside the folders this page may read" in w for w in warnings)


def test_a_refused_path_is_not_read_by_the_start_checks(page, tmp_path):
    """The start checks read the files a config names (an EMBEDDING run's captions must hold its
    placeholder): a file outside the page's folders is refused before they run, so no guess of
    its words changes the answer; the Runs tab lists only a workspace inside them."""
    outside = tmp_path.parent / f"{tmp_path.name}-oracle"
    outside.mkdir()
    (outside / "secret.txt").write_text("hf_TOKEN123\n")
    config = page._config_of(page.form_values(page.on_page_load()[page.config_state]))
    concept = {**config["concepts"][0], "text": {"prompt_source": "concept", "prompt_path": str(outside / "secret.txt")}}
    answers = []
    for guess in ("hf_TOKEN123", "nothing-like-it"):
        embedding = {**config["embedding"], "placeholder": guess}
        answers.append(page.validate({**config, "training_method": "EMBEDDING", "embedding": embedding, "concepts": [concept]})[1])
    assert answers[0] == answers[1] and all("prompt_path" in p for p in answers[0]), answers
    # nor by the Concepts tab's statistics (a Captions file elsewhere naming, or not, an image named as the guess)
    (outside / "tokens.json").write_text(json.dumps({"hf_TOKEN123": {"caption": "x"}}))
    stats = []
    for guess in ("hf_TOKEN123", "hf_WRONG"):
        folder = tmp_path / "guess" / guess
        folder.mkdir(parents=True)
        from PIL import Image

        Image.new("RGB", (16, 16)).save(folder / f"{guess}.png")
        named = {"name": "g", "path": str(folder), "text": {"captions_file": str(outside / "tokens.json")}}
        stats.append(page.concepts.statistics({**config, "concepts": [named]}, 0)[0].replace(guess, "GUESS"))
    assert stats[0] == stats[1] and stats[0].startswith("**Cannot read this concept:** text.captions_file: "), stats

    from ot_gradio.ui.state import load_ui_config, save_ui_config

    save_ui_config(page.workspace, {**load_ui_config(page.workspace), "workspace_dir": str(outside)})
    assert page.runs_workspace() == page.workspace
    save_ui_config(page.workspace, {**load_ui_config(page.workspace), "workspace_dir": str(page.workspace / "mine")})
    assert page.runs_workspace() == (page.workspace / "mine").resolve()
