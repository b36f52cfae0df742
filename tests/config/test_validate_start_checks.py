"""`validate` runs every check `train` runs before its first step, and `train` refuses the same
configs with the same one-line message, before it makes a run folder: a run
never fails at its final save for a reason known at the start."""

import json
import os
from pathlib import Path

import pytest

from ot_gradio.cli import main as cli_main
from ot_gradio.runner.startcheck import NAME_MAX

LONG_NAME = "n" * 300
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"")  # the check looks for image names, as the scan does
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("a caption without its image")
    (tmp_path / "t.gguf").write_bytes(b"GGUF")  # the GGUF cases' transformer file (a missing one is a problem of its own)
    (tmp_path / "broken.json").write_text("{not json")  # Captions files: unreadable, and naming no image of the folder
    (tmp_path / "others.json").write_text(json.dumps({"zz": {"caption": "another folder's image"}}))
    return tmp_path


def demo(folder, **values) -> str:
    """The demo preset with `values`, as a file (NUL bytes cannot be passed with --set)."""
    data = json.loads((ROOT / "presets" / "demo.json").read_text())
    data.update(values)
    path = folder / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


Z_IMAGE = {"model_type": "Z_IMAGE", "base_model_name": "owner/z-image", "output_model_format": "DIFFUSERS_LORA", "text_encoder": {"train": False}}
GGUF = {"weight_dtype": "GGUF", "model_name": "t.gguf"}
CASES = [
    ("base_model_name", {"base_model_name": ""}, "base_model_name: empty; enter a Hugging Face id"),
    ("missing base model file", {"base_model_name": "models/none.safetensors"}, "base_model_name: models/none.safetensors does not exist"),
    ("missing concept folder", {"concepts": [{"name": "x", "path": "no/such/folder"}]}, "concepts[0].path: folder no/such/folder does not exist"),
    ("empty concept folder", {"concepts": [{"name": "x", "path": "empty"}]}, "concepts[0].path: folder empty has no images"),
    ("missing prompt file", {"concepts": [{"name": "x", "path": "images", "text": {"prompt_source": "concept", "prompt_path": "no.txt"}}]},
     "concepts[0].text.prompt_path: no.txt does not exist"),
    ("missing captions file", {"concepts": [{"name": "x", "path": "images", "text": {"captions_file": "meta_cap.json"}}]},
     "concepts[0].text.captions_file: meta_cap.json does not exist; choose an existing captions file, or clear it"),
    ("unreadable captions file", {"concepts": [{"name": "x", "path": "images", "text": {"captions_file": "broken.json"}}]},
     "concepts[0].text.captions_file: Captions file broken.json could not be read"),
    ("captions file of no image here", {"concepts": [{"name": "x", "path": "images", "text": {"captions_file": "others.json"}}]},
     "concepts[0].text.captions_file: Captions file others.json names none of the 1 files in folder"),
    ("no enabled concept", {"concepts": [{"name": "x", "path": "images", "enabled": False}]}, "concepts[0].enabled: off"),
    ("unknown layer preset", {"layer_filter_preset": "nope"}, "layer_filter_preset: 'nope' is not a layer preset; choose one of full"),
    ("output name too long", {"output_model_destination": f"out/{LONG_NAME}.safetensors"}, "output_model_destination: the file name"),
    ("prefix too long", {"save_filename_prefix": "p" * 240}, "save_filename_prefix: with it, intermediate saves"),
    ("prefix with a folder", {"save_filename_prefix": "../../site-packages/x"}, "save_filename_prefix: '../../site-packages/x' is the start"),
    ("NUL in a path", {"cache_dir": "cache\0x"}, "cache_dir: contains a NUL character"),
    ("NUL in a concept", {"concepts": [{"name": "x", "path": "images\0"}]}, "concepts[0].path: contains a NUL character"),
    ("output under a file", {"output_model_destination": "afile/model.safetensors"}, "output_model_destination: "),
    ("prevent_overwrites, output there", {"prevent_overwrites": True, "output_model_destination": "old.safetensors"},
     "output_model_destination: old.safetensors already exists and prevent_overwrites is on"),
    ("only_cache without latent caching", {"only_cache": True, "latent_caching": False}, "only_cache: latent_caching is off"),
    ("base model path too long", {"base_model_name": "/" + "m/" * 3000 + "x.safetensors"}, "base_model_name: /m/m"),
    ("workspace name too long", {"workspace_dir": "w" * 5000}, "workspace_dir: www"),
    ("output path too long", {"output_model_destination": "/" + "o/" * 3000 + "x.safetensors"}, "output_model_destination: the path is longer"),
    # root may write everywhere by access(), but nothing can be made under /proc
    ("output under /proc", {"output_model_destination": "/proc/ot-gradio/model.safetensors"}, "output_model_destination: cannot write to /proc"),
    ("base folder of another family", {"model_type": "FLUX_DEV_1", "base_model_name": "./sd15"},
     "base_model_name: ./sd15 holds StableDiffusionPipeline (its model_index.json), which has no transformer and no text_encoder_2"),
    ("HiDream's hub folder, no Llama named", {"model_type": "HI_DREAM_FULL", "base_model_name": "./hidream", "text_encoder_4": {"train": False}},
     "base_model_name: ./hidream holds HiDreamImagePipeline (its model_index.json), which has no text_encoder_4; model type "
     "HI_DREAM_FULL loads those from the base model. Choose a HI_DREAM_FULL model or the model type that matches this folder, "
     "or set text_encoder_4.model_name to a model of its own"),
    ("base folder index not UTF-8", {"model_type": "FLUX_DEV_1", "base_model_name": "./broken"},
     "base_model_name: broken/model_index.json: is not UTF-8 text"),
    # GGUF transformer weights (config/gguf.py): a LoRA on a .gguf transformer file of a family that reads one
    ("GGUF fine-tune", {**Z_IMAGE, "training_method": "FINE_TUNE", "output_model_format": "SAFETENSORS", "transformer": GGUF},
     "transformer.train: GGUF weights cannot be trained"),
    ("missing .gguf text encoder", {**Z_IMAGE, "text_encoder": {"train": False, "model_name": "qwen3-4b-Q8_0.gguf"}},
     "text_encoder.model_name: qwen3-4b-Q8_0.gguf does not exist"),
    ("GGUF without a .gguf file", {**Z_IMAGE, "transformer": {"weight_dtype": "GGUF"}},
     "transformer.model_name: GGUF weights (transformer.weight_dtype) come from a .gguf transformer file"),
    ("a .gguf file without GGUF", {**Z_IMAGE, "transformer": {"model_name": "t.gguf", "weight_dtype": "BFLOAT_16"}},
     "transformer.weight_dtype: transformer.model_name is a .gguf file, which loads as GGUF; set GGUF (or GGUF_A8_INT / GGUF_A8_FLOAT), not BFLOAT_16"),
    ("GGUF text encoder", {**Z_IMAGE, "transformer": GGUF, "text_encoder": {"train": False, "weight_dtype": "GGUF"}},
     "text_encoder.weight_dtype: GGUF is a weight type of the transformer"),
    ("GGUF of a family without it", {"model_type": "SANA", "base_model_name": "owner/sana", "text_encoder": {"train": False}, "transformer": GGUF},
     "transformer.weight_dtype: SANA does not load .gguf transformer files (GGUF is offered for FLUX_DEV_1, FLUX_2, "),
]
# model_index.json of the hub's SD 1.5 folder (stable-diffusion-v1-5/stable-diffusion-v1-5), as downloaded
SD15_INDEX = {
    "_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.6.0",
    "feature_extractor": ["transformers", "CLIPImageProcessor"], "safety_checker": ["stable_diffusion", "StableDiffusionSafetyChecker"],
    "scheduler": ["diffusers", "PNDMScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
    "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
}


HIDREAM_PARTS = {"_class_name": "HiDreamImagePipeline", **{p: ["x", "y"] for p in ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3")}}


@pytest.mark.parametrize(("name", "values", "message"), CASES, ids=[c[0] for c in CASES])
def test_validate_and_train_refuse_at_the_start(folder, capsys, name, values, message):
    (folder / "afile").write_text("x")
    (folder / "old.safetensors").write_text("an earlier run's model")
    (folder / "sd15").mkdir()
    (folder / "sd15" / "model_index.json").write_text(json.dumps(SD15_INDEX))
    (folder / "hidream").mkdir()  # HiDream-ai's repos list the Llama empty
    (folder / "hidream" / "model_index.json").write_text(json.dumps({**HIDREAM_PARTS, "text_encoder_4": [None, None]}))
    (folder / "broken").mkdir()
    (folder / "broken" / "model_index.json").write_bytes(b'{"_class_name": "Flux\xffPipeline"}')
    config = demo(folder, **values)
    assert cli_main(["validate", "--config", config]) == 2
    out = capsys.readouterr()
    assert message in out.err and "ok:" not in out.out and "Traceback" not in out.err
    errors = [line for line in out.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and len(errors[0]) < 400, errors
    assert cli_main(["train", "--config", config]) == 2
    out = capsys.readouterr()
    assert message in out.err and "Traceback" not in out.err
    assert not (folder / "workspace" / "demo" / "runs").exists()  # refused before a run folder exists


def test_the_demo_and_a_good_config_are_ok(folder, capsys):
    assert cli_main(["validate", "--config", "demo"]) == 0
    assert "ok: config is valid and can start here" in capsys.readouterr().out
    config = demo(folder, concepts=[{"name": "x", "path": "images"}], base_model_name="owner/model",
                  output_model_destination=f"out/{'n' * (NAME_MAX - 14 - 15 - 12)}.safetensors", prevent_overwrites=True)
    assert cli_main(["validate", "--config", config]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("adapter", [{"peft_type": "LOHA"}, {"peft_type": "LOKR"}, {"lora_decompose": True, "lora_decompose_output_axis": True}],
                         ids=["LoHa", "LoKr", "DoRA"])
def test_loha_lokr_and_dora_on_a_gguf_transformer_can_start(folder, capsys, adapter):
    """They compute with the layer's real weights (dequantized from its blocks): not refused
    (tests/models/test_gguf_transformer.py trains them)."""
    config = demo(folder, **Z_IMAGE, transformer=GGUF, **adapter, concepts=[{"name": "x", "path": "images"}])
    assert cli_main(["validate", "--config", config]) == 0, capsys.readouterr().err


def test_an_output_folder_that_cannot_be_written_is_named(folder, capsys, monkeypatch):
    (folder / "locked").mkdir(mode=0o500)
    if os.geteuid() == 0:  # root may write anywhere: the folder answers as it would to a user
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p).name == "locked" else real(p, mode))
    config = demo(folder, output_model_destination="locked/sub/model.safetensors")
    assert cli_main(["validate", "--config", config]) == 2
    assert "output_model_destination: cannot write to" in capsys.readouterr().err


def test_validate_writes_a_conversion_even_when_it_cannot_start_here(folder, capsys):
    config = demo(folder, concepts=[{"name": "x", "path": "gone"}])
    assert cli_main(["validate", "--config", config, "--output", "converted.json"]) == 2
    assert json.loads((folder / "converted.json").read_text())["concepts"][0]["path"] == "gone"
    assert cli_main(["validate", "--config", config, "--output", "no\0.json"]) == 2
    assert "--output: cannot write" in capsys.readouterr().err


def test_validate_train_and_the_page_refuse_with_one_list(folder, capsys):
    """One list of start checks: the config's own errors and the machine's problems together, the
    same lines from `validate`, `train` and the page's Start."""
    from ot_gradio.ui.page import validate

    values = {"learning_rate_scheduler": "ADAFACTOR", "concepts": [{"name": "x", "path": "gone"}]}
    config = demo(folder, **values)
    lines = []
    for command in ("validate", "train"):
        assert cli_main([command, "--config", config]) == 2
        lines.append([line.removeprefix("error: ") for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")])
    _, problems, _ = validate(json.loads(Path(config).read_text()))
    assert lines[0] == lines[1] == problems, (lines, problems)
    assert [p.split(":")[0] for p in problems] == ["learning_rate_scheduler", "concepts[0].path"], problems


class _Stopped(Exception):
    pass


def test_validate_and_train_print_the_pages_note_on_a_base_model_of_another_family(folder, capsys, monkeypatch):
    from ot_gradio.config.base_model_match import base_model_mismatch

    config = demo(folder, base_model_name="black-forest-labs/FLUX.1-dev", concepts=[{"name": "x", "path": "images"}])
    note = base_model_mismatch(json.loads(Path(config).read_text())["model_type"], "black-forest-labs/FLUX.1-dev")
    assert note and "looks like" in note
    assert cli_main(["validate", "--config", config]) == 0
    assert f"warning: {note}" in capsys.readouterr().out.splitlines()

    def stop(config):  # the run itself would try to load the model
        raise _Stopped

    monkeypatch.setattr("ot_gradio.data.demo.ensure_demo_concepts", stop)
    with pytest.raises(_Stopped):
        cli_main(["train", "--config", config])
    assert f"warning: {note}" in capsys.readouterr().err.splitlines()
