"""Tokens live in the workspace's owner-only secrets.json and nowhere else."""

import json
import os
import stat

import pytest

from ot_gradio.config.io import config_to_dict, load_config, save_config
from ot_gradio.config.schema import TrainConfig
from ot_gradio.secrets import apply_secrets, read_secrets, secrets_path, take_secrets, write_secrets

TOKEN = "hf_TESTTOKEN1234567890"


def test_secrets_file_is_owner_only_and_round_trips(tmp_path):
    path = write_secrets(tmp_path, huggingface_token=TOKEN)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_secrets(tmp_path) == {"huggingface_token": TOKEN}
    write_secrets(tmp_path, huggingface_token="")
    assert read_secrets(tmp_path) == {}
    with pytest.raises(ValueError, match="Unknown secret"):
        write_secrets(tmp_path, password="x")


def test_a_file_others_can_read_is_tightened(tmp_path):
    write_secrets(tmp_path, huggingface_token=TOKEN)
    os.chmod(secrets_path(tmp_path), 0o644)
    assert read_secrets(tmp_path)["huggingface_token"] == TOKEN
    assert stat.S_IMODE(secrets_path(tmp_path).stat().st_mode) == 0o600


def test_configs_never_carry_the_token(tmp_path):
    config = TrainConfig(secrets={"huggingface_token": TOKEN})
    assert "secrets" not in config_to_dict(config)
    assert config_to_dict(config, include_secrets=True)["secrets"]["huggingface_token"] == TOKEN
    saved = save_config(config, tmp_path / "c.json")
    assert TOKEN not in saved.read_text()


def test_a_token_in_a_loaded_config_moves_to_the_secrets_file(tmp_path):
    data = config_to_dict(TrainConfig(secrets={"huggingface_token": TOKEN}), include_secrets=True)
    warnings = take_secrets(data, tmp_path / "ws")
    assert warnings and "secrets.huggingface_token" in warnings[0]
    assert data["secrets"]["huggingface_token"] == ""
    assert read_secrets(tmp_path / "ws")["huggingface_token"] == TOKEN
    config = load_config(data).config
    apply_secrets(config, tmp_path / "ws")
    assert config.secrets.huggingface_token == TOKEN


@pytest.mark.slow
def test_a_run_with_a_token_writes_it_nowhere_but_the_secrets_file(tmp_path, lora_config, monkeypatch):
    """Train in-process through the CLI with a token in the config file: the model loader gets
    the token, and no file of the workspace, the outputs or the run (config, events, log,
    backups, TensorBoard, the LoRA's metadata) contains it."""
    from ot_gradio import cli
    from ot_gradio.models.sd15 import StableDiffusion15

    seen = {}
    original = StableDiffusion15.load.__func__

    def spy(cls, name, **kwargs):
        seen["token"] = kwargs.get("token")
        return original(cls, name, **kwargs)

    monkeypatch.setattr(StableDiffusion15, "load", classmethod(spy))
    config = lora_config(epochs=1, backup_after=1, backup_after_unit="STEP", secrets={"huggingface_token": TOKEN})
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    assert cli.main(["train", "--config", str(path)]) == 0
    assert seen["token"] == TOKEN
    leaks = [
        p for p in tmp_path.rglob("*")
        if p.is_file() and p.name != "secrets.json" and p != path and TOKEN.encode() in p.read_bytes()
    ]
    assert leaks == []
    assert read_secrets(config["workspace_dir"])["huggingface_token"] == TOKEN


# --- every method, every secret field, every include_train_config -----------------------------

# one canary per secret field of the schema (secrets.*, the cloud API key and hub token)
CANARIES = {
    "secrets.huggingface_token": "hf_CANARYsecretsHubToken01",
    "secrets.cloud.api_key": "CANARYsecretsCloudKey02",
    "cloud.api_key": "CANARYcloudApiKey03",
    "cloud.huggingface_token": "hf_CANARYcloudHubToken04",
}


def _with_canaries(config):
    config["secrets"] = {
        "huggingface_token": CANARIES["secrets.huggingface_token"],
        "cloud": {"api_key": CANARIES["secrets.cloud.api_key"]},
    }
    config["cloud"] = {"api_key": CANARIES["cloud.api_key"], "huggingface_token": CANARIES["cloud.huggingface_token"]}
    return config


def _header(path):
    from ot_gradio.training.output_metadata import read_header

    return read_header(path)[0].get("__metadata__", {})


EMB = [{"placeholder": "<trig>", "token_count": 1, "initial_embedding_text": "dog"}]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "fmt", "dest", "part", "extra"),
    [
        ("LORA", "KOHYA_LORA", "lora.safetensors", "ALL", {"additional_embeddings": EMB}),
        ("LORA", "SAFETENSORS", "lora.safetensors", "SETTINGS", {}),
        ("LORA", "KOHYA_LORA", "lora.safetensors", "NONE", {}),
        ("FINE_TUNE", "SAFETENSORS", "model.safetensors", "ALL", {"additional_embeddings": EMB}),
        ("FINE_TUNE", "DIFFUSERS", "model", "SETTINGS", {}),
        ("EMBEDDING", "SAFETENSORS", "emb.safetensors", "ALL", {"embedding": {"placeholder": "circle", "token_count": 1, "initial_embedding_text": "circle"}}),
    ],
)
def test_no_run_writes_a_secret_outside_the_secret_store(tmp_path, lora_config, four_shapes, method, fmt, dest, part, extra):
    """A one-step run of every method with a canary in every secret field: no byte of any file
    it wrote (outputs, embeddings next to them, caches, the run folder with its config, backups
    and log, the workspace) holds a canary, except the workspace's secrets.json, whatever
    include_train_config says; the config goes in only as asked."""
    from ot_gradio import cli

    out = tmp_path / "out" / dest
    base = lora_config()
    config = _with_canaries(lora_config(
        training_method=method, output_model_format=fmt, output_model_destination=str(out), include_train_config=part,
        epochs=1, concepts=[{**base["concepts"][0], "path": str(four_shapes), "balancing": 2, "balancing_strategy": "SAMPLES"}],
        **extra,
    ))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    assert cli.main(["train", "--config", str(path)]) == 0
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != path and p.name != "secrets.json"]
    assert any(p == out or out in p.parents for p in written)
    leaks = [(str(p), name) for p in written for name, canary in CANARIES.items() if canary.encode() in p.read_bytes()]
    assert leaks == []

    header_file = out / "unet" / "diffusion_pytorch_model.safetensors" if fmt == "DIFFUSERS" else out
    meta = json.loads((out / "model_index.json").read_text())["_ot_gradio_metadata"] if fmt == "DIFFUSERS" else _header(header_file)
    assert meta["modelspec.sai_model_spec"] == "1.0.0" and meta["ss_resolution"] == "(64, 64)"
    if part == "NONE":
        assert "ot_gradio_config" not in meta
        return
    embedded = json.loads(meta["ot_gradio_config"])
    assert "secrets" not in embedded and "api_key" not in embedded.get("cloud", {})
    assert embedded["training_method"] == method and embedded["include_train_config"] == part
    if part == "ALL":
        assert embedded["concepts"][0]["path"] == str(four_shapes)  # ALL keeps local paths
    else:
        assert "concepts" not in embedded and "samples" not in embedded and "cloud" not in embedded
        assert str(tmp_path) not in meta["ot_gradio_config"]  # no absolute local path with SETTINGS
    if extra.get("additional_embeddings"):
        emb_file = out.with_name(out.stem + "_embeddings") / "trig.safetensors"
        assert _header(emb_file)["modelspec.trigger_phrase"] == "<trig>"
        # named in the run's events, so the page lists it beside the model
        from ot_gradio.runner.supervisor import RunState
        from ot_gradio.ui.monitor import status_markdown

        state = RunState("r")
        for events in (tmp_path / "ws" / "runs").rglob("events.jsonl"):
            for line in events.read_text().splitlines():
                state.apply(json.loads(line))
        assert state.embedding_files == [str(emb_file)] and state.saved[-1] == str(out)
        assert f"`{emb_file}`" in status_markdown(state)
