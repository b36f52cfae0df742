"""What saved models carry in their headers: the config only as include_train_config asks, never a
secret; kohya's keys, formats and precomputed hashes; Stability's model-spec keys."""

import datetime
import hashlib
import json
import struct
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save, save_file

from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.lora_format import read_lora_metadata, save_lora_parts
from ot_gradio.training.output_metadata import (
    add_safetensors_metadata,
    embedded_config,
    model_metadata,
    read_header,
    secret_values,
)

SECRETS = {"hub": "hf_SECRET_hub_1", "cloudkey": "SECRET_cloud_2", "cloudhub": "hf_SECRET_cloudhub_3", "inner": "SECRET_inner_4"}
SD15 = SimpleNamespace(modelspec_architecture="stable-diffusion-v1", lora_base_model_version="sd_v1", model_type="STABLE_DIFFUSION_15")
SDXL = SimpleNamespace(modelspec_architecture="stable-diffusion-xl-v1-base", lora_base_model_version="sdxl_base_v1-0", model_type="STABLE_DIFFUSION_XL_10_BASE")
SD2V = SimpleNamespace(modelspec_architecture="stable-diffusion-v2-768-v", lora_base_model_version="sd_v2_v", model_type="STABLE_DIFFUSION_21")
PIXART = SimpleNamespace(modelspec_architecture=None, lora_base_model_version="pixart_alpha", model_type="PIXART_ALPHA")


def _config(part="NONE", **overrides):
    overrides = {"base_model_name": "/home/me/models/sd15-base", **overrides}
    return TrainConfig(
        workspace_dir="/home/me/ws",
        output_model_destination="/home/me/out/lora.safetensors",
        concepts=[{"name": "cats", "path": "/home/me/data/cats"}],
        samples=[{"prompt": "a cat"}],
        resolution="512,768x640",
        include_train_config=part,
        secrets={"huggingface_token": SECRETS["hub"], "cloud": {"api_key": SECRETS["inner"]}},
        cloud={"api_key": SECRETS["cloudkey"], "huggingface_token": SECRETS["cloudhub"], "host": "box.example"},
        **overrides,
    )


def test_secret_values_are_every_secret_field():
    assert set(secret_values(_config())) == set(SECRETS.values())


def test_none_embeds_nothing():
    assert embedded_config(_config("NONE")) is None
    assert "ot_gradio_config" not in model_metadata(_config("NONE"), SD15, kind="lora")


def test_settings_leaves_out_data_cloud_and_local_paths():
    data = embedded_config(_config("SETTINGS"))
    assert not {"concepts", "samples", "cloud", "secrets"} & set(data)
    text = json.dumps(data)
    assert "/home/me" not in text
    assert data["base_model_name"] == "sd15-base" and data["output_model_destination"] == "lora.safetensors"
    assert data["resolution"] == "512,768x640"


def test_all_keeps_everything_but_secrets():
    data = embedded_config(_config("ALL"))
    assert data["concepts"][0]["path"] == "/home/me/data/cats" and data["samples"][0]["prompt"] == "a cat"
    assert data["cloud"]["host"] == "box.example" and "secrets" not in data
    assert not {"api_key", "huggingface_token"} & set(data["cloud"])
    text = json.dumps(model_metadata(_config("ALL"), SD15, kind="lora"))
    assert not [s for s in SECRETS.values() if s in text]


def test_a_secret_elsewhere_in_the_config_is_blanked_out():
    config = _config("ALL")
    config.samples[0].prompt = f"a cat {SECRETS['hub']}"
    meta = model_metadata(config, SD15, kind="lora")
    assert SECRETS["hub"] not in meta["ot_gradio_config"] and "<redacted>" in meta["ot_gradio_config"]


@pytest.mark.parametrize("part", ["NONE", "SETTINGS"])
def test_local_base_model_is_named_by_its_last_name_unless_all(part):
    meta = model_metadata(_config(part), SD15, kind="lora")
    assert meta["ss_sd_model_name"] == meta["ss_base_model_name"] == "sd15-base"
    assert model_metadata(_config("ALL"), SD15, kind="lora")["ss_base_model_name"] == "/home/me/models/sd15-base"
    hub = model_metadata(_config(part, **{"base_model_name": "org/some-model"}), SD15, kind="lora")
    assert hub["ss_sd_model_name"] == "org/some-model"


@pytest.mark.parametrize(
    ("model", "kind", "arch", "impl"),
    [
        (SD15, "lora", "stable-diffusion-v1/lora", "diffusers"),
        (SDXL, "lora", "stable-diffusion-xl-v1-base/lora", "https://github.com/Stability-AI/generative-models"),
        (SD15, "embedding", "stable-diffusion-v1/textual-inversion", "https://github.com/Stability-AI/generative-models"),
        (SDXL, "checkpoint", "stable-diffusion-xl-v1-base", "https://github.com/Stability-AI/generative-models"),
        (PIXART, "lora", "pixart-alpha/lora", "diffusers"),
    ],
)
def test_model_spec_keys(model, kind, arch, impl):
    before = datetime.datetime.now().replace(microsecond=0)
    meta = model_metadata(_config(), model, kind=kind, title="my-lora", steps=7, epoch=2, trigger_phrases=["<a>", "<b>"])
    assert meta["modelspec.sai_model_spec"] == "1.0.0"
    assert meta["modelspec.architecture"] == arch and meta["modelspec.implementation"] == impl
    assert meta["modelspec.title"] == "my-lora" and meta["modelspec.resolution"] == "768x640"
    assert meta["ss_resolution"] == "(768, 640)"  # the largest of "512,768x640" (W x H), as kohya's "(W, H)"
    assert before <= datetime.datetime.fromisoformat(meta["modelspec.date"]) <= datetime.datetime.now()
    assert meta["modelspec.trigger_phrase"] == "<a>, <b>"
    assert (meta["ss_steps"], meta["ss_epoch"]) == ("7", "2")
    assert meta.get("modelspec.prediction_type") == (None if model is PIXART else "epsilon")


def test_diffusers_layout_checkpoint_and_v_prediction():
    meta = model_metadata(_config(), SD2V, kind="checkpoint", diffusers_layout=True)
    assert meta["modelspec.implementation"] == "diffusers" and meta["modelspec.prediction_type"] == "v"
    assert meta["modelspec.title"].startswith("Checkpoint@")


def test_a_v_prediction_sdxl_lora_says_so():
    """A LoRA of a v-prediction SDXL model (NoobAI-XL V-pred, or force_v_prediction) was labelled epsilon."""
    vpred = SimpleNamespace(**vars(SDXL), prediction_type="v_prediction")
    meta = model_metadata(_config(), vpred, kind="lora")
    assert meta["modelspec.prediction_type"] == "v" and meta["ss_v_parameterization"] == "True"
    plain = model_metadata(_config(), SimpleNamespace(**vars(SDXL), prediction_type="epsilon"), kind="lora")
    assert plain["modelspec.prediction_type"] == "epsilon" and "ss_v_parameterization" not in plain


def _kohya_hashes_of(path):
    """kohya's recipe, written out from its description: serialize the file's tensors with only the
    `ss_*` metadata; model hash = SHA-256 of what follows the 8-byte length and the JSON header;
    legacy hash = first 8 hex digits of SHA-256 of the 64 KiB at offset 1 MiB."""
    meta = {k: v for k, v in read_lora_metadata(path).items() if k.startswith("ss_")}
    data = save(load_file(str(path)), metadata=meta)
    n = int.from_bytes(data[:8], "little")
    return hashlib.sha256(data[8 + n :]).hexdigest(), hashlib.sha256(data[0x100000:0x110000]).hexdigest()[:8]


@pytest.mark.parametrize("rank", [4, 256])  # 256: a file over 1 MiB, so the legacy hash reads real bytes
def test_kohya_hashes(tmp_path, rank):
    torch.manual_seed(0)
    parts = {"unet": {
        "down_blocks.0.attentions.0.proj_in.lora_A.weight": torch.randn(rank, 320),
        "down_blocks.0.attentions.0.proj_in.lora_B.weight": torch.randn(320, rank),
    }}
    path = save_lora_parts(tmp_path / "l.safetensors", parts, rank, rank, extra_metadata={"modelspec.title": "x"})
    meta = read_lora_metadata(path)
    model_hash, legacy = _kohya_hashes_of(path)
    assert (meta["sshs_model_hash"], meta["sshs_legacy_hash"]) == (model_hash, legacy)
    assert path.stat().st_size > 0x110000 or legacy == hashlib.sha256(b"").hexdigest()[:8]
    # the hash ignores non-ss metadata, as kohya's: another title, the same hashes
    other = save_lora_parts(tmp_path / "m.safetensors", parts, rank, rank, extra_metadata={"modelspec.title": "y"})
    assert read_lora_metadata(other)["sshs_model_hash"] == model_hash


def test_metadata_is_added_to_a_saved_file_without_touching_its_tensors(tmp_path):
    tensors = {"a": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.int64), "c": torch.randn(2).half()}
    path = tmp_path / "m.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    add_safetensors_metadata(path, {"modelspec.title": "t", "ot_gradio_config": json.dumps({"x": "é"})})
    header, start = read_header(path)
    assert start % 8 == 0 and header["__metadata__"] == {"format": "pt", "modelspec.title": "t", "ot_gradio_config": '{"x": "\\u00e9"}'}
    loaded = load_file(str(path))
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
    assert struct.unpack("<Q", path.read_bytes()[:8])[0] + 8 == start
