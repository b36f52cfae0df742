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
