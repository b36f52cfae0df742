"""Load, save, round trip, unknown keys and error messages."""

import json
import math
import os

import pytest

from ot_gradio.config.concept import ConceptConfig
from ot_gradio.config.enums import DataType, ModelFormat, Optimizer, TimeUnit, TrainingMethod
from ot_gradio.config.io import ConfigError, config_to_dict, load_config, save_config
from ot_gradio.config.optimizer import OptimizerConfig
from ot_gradio.config.parts import SampleConfig
from ot_gradio.config.schema import CONFIG_VERSION, TrainConfig


def a_config() -> TrainConfig:
    config = TrainConfig(
        training_method=TrainingMethod.LORA, output_model_format=ModelFormat.KOHYA_LORA, seed=7, batch_size=3,
        resolution="384,448,512", clip_grad_norm=None, sample_after_unit=TimeUnit.EPOCH,
        concepts=[ConceptConfig(name="cat", path="data/cat", balancing=2.5), ConceptConfig(name="dog", enabled=False)],
        samples=[SampleConfig(prompt="a cat", width=768)],
        optimizer=OptimizerConfig(optimizer=Optimizer.ADAMW, beta1=0.95, weight_decay=0.01),
        optimizer_defaults={"PRODIGY": OptimizerConfig(optimizer=Optimizer.PRODIGY, growth_rate=math.inf, d_coef=0.5)},
    )
    config.unet.weight_dtype = DataType.FLOAT_16
    config.concepts[0].image.enable_random_flip = True
    config.secrets.huggingface_token = "hf_secret"
    return config


def test_round_trip(tmp_path):
    config = a_config()
    path = save_config(config, tmp_path / "sub" / "config.json")
    data = json.loads(path.read_text())
    assert data["config_version"] == CONFIG_VERSION
    assert data["optimizer_defaults"]["PRODIGY"]["growth_rate"] == "Infinity"  # valid JSON, no bare Infinity
    assert "__version" not in data
    assert "hf_secret" not in path.read_text()  # tokens live in the workspace's secrets file
    loaded = load_config(path)
    assert loaded.warnings == []
    assert loaded.config.secrets.huggingface_token == ""
    loaded.config.secrets.huggingface_token = "hf_secret"
    assert loaded.config == config
    assert config_to_dict(loaded.config) == config_to_dict(config)


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    save_config(TrainConfig(epochs=5), path)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        save_config(TrainConfig(epochs=6), path)
    assert json.loads(path.read_text())["epochs"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_unknown_keys_give_one_warning_with_full_paths():
    result = load_config({"config_version": 1, "epochz": 3, "concepts": [{"name": "a", "image": {"foo": 1}}],
                          "optimizer": {"optimizer": "ADAMW", "bar": 2}, "optimizer_defaults": {"SGD": {"baz": 1}}})
    assert len(result.warnings) == 1
    warning = result.warnings[0]
    for path in ("epochz", "concepts[0].image.foo", "optimizer.bar", "optimizer_defaults.SGD.baz"):
        assert path in warning
    assert result.config.concepts[0].name == "a"


def test_invalid_values_name_the_field_and_what_is_allowed():
    with pytest.raises(ConfigError) as info:
        load_config({"config_version": 1, "batch_size": 0, "optimizer": {"optimizer": "FOO"},
                     "concepts": [{"balancing": -1}], "resolution": "huge", "epochs": "many"})
    errors = info.value.errors
    assert "batch_size: must be >= 1 (got 0)" in errors
    assert any(e.startswith("optimizer.optimizer: must be one of ADAGRAD, ") and "ADAMW" in e and e.endswith("(got 'FOO')") for e in errors)
    assert "concepts[0].balancing: must be > 0 (got -1)" in errors
    assert any(e.startswith("resolution: 'huge' is not a resolution") for e in errors)
    assert "epochs: must be a whole number (got 'many')" in errors
    message = str(info.value)
    assert "pydantic" not in message and "errors.pydantic.dev" not in message and "Input should" not in message


def test_one_error_is_the_message():
    with pytest.raises(ConfigError, match=r"^samples\[0\]\.height: must be >= 64 \(got 8\)$"):
        load_config({"config_version": 1, "samples": [{"height": 8}]})


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ConfigError, match="JSON object"):
        load_config(tmp_path / "list.json")


def test_newer_version_is_refused():
    with pytest.raises(ConfigError, match="config_version"):
        load_config({"config_version": CONFIG_VERSION + 1})
