"""Presets in presets/: sparse overlays that load and validate."""

import pytest

from ot_gradio.config.doctor import check, errors
from ot_gradio.config.enums import DataType, ModelFormat, ModelType, TimeUnit, TrainingMethod
from ot_gradio.config.io import ConfigError, config_to_dict, load_config
from ot_gradio.config.presets import PRESETS_DIR, apply_preset, list_presets, load_preset, resolve_preset_path
from ot_gradio.config.schema import TrainConfig


def test_shipped_presets():
    assert {"demo", "sd15-lora", "sd15-embedding", "sd15-finetune", "flux-dev-1-lora", "flux-fill-dev-1-lora"} <= set(list_presets())


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_loads_and_validates(name):
    overlay = load_preset(name)
    merged = apply_preset(config_to_dict(TrainConfig()), overlay)
    result = load_config(merged)
    assert result.warnings == []
    # the file itself is a valid (sparse) config too
    assert load_config(resolve_preset_path(name)).warnings == []
    # a family and method the trainer trains, nothing the check before a run would refuse or warn
    # about but the missing concepts (a preset names no data) and, for Flux.2's diffusers-layout
    # LoRA (the layout its pipeline loads whole), that ComfyUI reads only part of that layout
    assert errors(result.config) == []
    notes = [w for w in check(result.config) if not w.startswith("There are no concepts")]
    assert [w for w in notes if not (name == "flux2-lora" and "ComfyUI skips" in w)] == []


def test_presets_are_sparse():
    for name in list_presets():
        assert len(load_preset(name)) < 40, name


def test_lora_preset_values():
    config = load_config(apply_preset(config_to_dict(TrainConfig()), load_preset("sd15-lora"))).config
    assert config.training_method == TrainingMethod.LORA and config.output_model_format == ModelFormat.KOHYA_LORA
    assert (config.learning_rate, config.lora_rank, config.lora_alpha, config.batch_size, config.epochs) == (3e-4, 16, 1.0, 4, 100)
    assert config.layer_filter_preset == "attn-mlp" and config.unet.weight_dtype == DataType.FLOAT_16


def test_flux_fill_preset_trains_with_masks(tmp_path):
    """Flux.1 Fill learns to fill masks: its preset is Flux's LoRA on the Fill model with masked
    training on, and a concept without mask files is refused before the start."""
    overlay = load_preset("flux-fill-dev-1-lora")
    flux = load_preset("flux-dev-1-lora")
    assert overlay == {**flux, "model_type": "FLUX_FILL_DEV_1", "base_model_name": "black-forest-labs/FLUX.1-Fill-dev",
                       "masked_training": True}
    (tmp_path / "cat.png").write_bytes(b"")
    merged = apply_preset(config_to_dict(TrainConfig()), {**overlay, "concepts": [{"name": "cats", "path": str(tmp_path)}]})
    config = load_config(merged).config
    assert config.model_type == ModelType.FLUX_FILL_DEV_1 and config.masked_training
    assert [e for e in errors(config) if e.startswith("concepts: no image of the enabled concepts has a '<name>-masklabel.png'")]
    (tmp_path / "cat-masklabel.png").write_bytes(b"")
    assert errors(load_config(merged).config) == []


def test_the_readme_names_every_preset():
    readme = (PRESETS_DIR.parent / "README.md").read_text(encoding="utf-8")
    missing = [name for name in list_presets() if f"`{name}`" not in readme and f"presets/{name}.json" not in readme]
    assert missing == [], f"README.md does not name these presets: {missing}"


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


def test_a_onetrainer_preset_with_accumulation_counts_its_steps_as_optimizer_steps(tmp_path):
    (tmp_path / "mine.json").write_text('{"model_type": "STABLE_DIFFUSION_15", "gradient_accumulation_steps": 2, '
                                        '"learning_rate_warmup_steps": 100, "sample_after": 50, "sample_after_unit": "STEP"}')
    overlay = load_preset("mine", tmp_path)
    assert (overlay["learning_rate_warmup_steps"], overlay["sample_after"]) == (50, 25)
