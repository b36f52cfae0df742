"""Presets in presets/: sparse overlays that load and validate."""

import pytest

from ot_gradio.config.doctor import check
from ot_gradio.config.enums import DataType, ModelFormat, TimeUnit, TrainingMethod
from ot_gradio.config.io import ConfigError, config_to_dict, load_config
from ot_gradio.config.presets import PRESETS_DIR, apply_preset, list_presets, load_preset, resolve_preset_path
from ot_gradio.config.schema import TrainConfig


def test_shipped_presets():
    assert {"demo", "sd15-lora", "sd15-embedding", "sd15-finetune"} <= set(list_presets())


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_loads_and_validates(name):
    overlay = load_preset(name)
    merged = apply_preset(config_to_dict(TrainConfig()), overlay)
    result = load_config(merged)
    assert result.warnings == []
    # the file itself is a valid (sparse) config too
    assert load_config(resolve_preset_path(name)).warnings == []


def test_presets_are_sparse():
    for name in list_presets():
        assert len(load_preset(name)) < 40, name


def test_lora_preset_values():
    config = load_config(apply_preset(config_to_dict(TrainConfig()), load_preset("sd15-lora"))).config
    assert config.training_method == TrainingMethod.LORA and config.output_model_format == ModelFormat.KOHYA_LORA
    assert (config.learning_rate, config.lora_rank, config.lora_alpha, config.batch_size, config.epochs) == (3e-4, 16, 1.0, 4, 100)
    assert config.layer_filter_preset == "attn-mlp" and config.unet.weight_dtype == DataType.FLOAT_16


def test_demo_preset_is_an_offline_cpu_lora_without_warnings():
    config = load_config(PRESETS_DIR / "demo.json").config
    assert config.base_model_name == "tiny:sd15" and config.train_device == "cpu"
    assert config.train_dtype == DataType.FLOAT_32 and config.resolution == "64"
    assert config.concepts[0].path == "workspace/demo-data/shapes"
    assert (config.samples[0].width, config.samples[0].height, config.samples[0].diffusion_steps) == (64, 64, 4)
    assert config.sample_after_unit == TimeUnit.EPOCH and config.text_encoder.train
    assert check(config) == []


def test_apply_preset_merges_deeply_and_replaces_lists():
    base = {"a": 1, "unet": {"train": True, "weight_dtype": "FLOAT_32"}, "concepts": [{"name": "x"}]}
    merged = apply_preset(base, {"unet": {"weight_dtype": "FLOAT_16"}, "concepts": [{"name": "y"}]})
    assert merged == {"a": 1, "unet": {"train": True, "weight_dtype": "FLOAT_16"}, "concepts": [{"name": "y"}]}
    assert base["unet"]["weight_dtype"] == "FLOAT_32"


def test_onetrainer_preset_as_overlay(tmp_path):
    (tmp_path / "ot.json").write_text('{"__version": 11, "unet": {"__version": 0, "weight_dtype": "FLOAT_16"}, "concepts": null}')
    overlay = load_preset("ot", tmp_path)
    assert overlay["unet"] == {"weight_dtype": "FLOAT_16"} and overlay["concepts"] == []


def test_unknown_preset():
    with pytest.raises(ConfigError, match="not found"):
        load_preset("no-such-preset")
    assert resolve_preset_path("no-such-preset") is None
