"""CLI --set overrides."""

import pytest

from ot_gradio.config.io import ConfigError, apply_overrides, load_config


def test_overrides_parse_values_by_field_type():
    data = apply_overrides({"config_version": 1, "concepts": [{"name": "a"}]}, [
        "epochs=5", "optimizer.beta1=0.95", "concepts.0.path=data/cats", "concepts[0].name=123",
        "resolution=768", "clip_grad_norm=null", "text_encoder.train=false", "optimizer.optimizer=SGD",
        "concepts.1.path=data/dogs", "samples.0.prompt=a \"quoted\" cat", "cloud.enabled=true",
    ])
    config = load_config(data).config
    assert config.epochs == 5 and config.optimizer.beta1 == 0.95
    assert config.concepts[0].path == "data/cats" and config.concepts[0].name == "123"
    assert config.concepts[1].path == "data/dogs"
    assert config.resolution == "768" and config.clip_grad_norm is None
    assert config.text_encoder.train is False and config.optimizer.optimizer.value == "SGD"
    assert config.samples[0].prompt == 'a "quoted" cat'
    assert config.cloud["enabled"] is True


def test_overrides_do_not_change_the_input():
    data = {"epochs": 1}
    assert apply_overrides(data, ["epochs=2"]) == {"epochs": 2}
    assert data == {"epochs": 1}


@pytest.mark.parametrize("item, fragment", [
    ("foo.bar=1", "foo is not an option"),
    ("optimizer.nope=1", "optimizer.nope is not an option"),
    ("concepts.3.path=x", "concepts.3 does not exist"),
    ("concepts.x.path=1", "concepts.x must be a list index"),
    ("epochs.x=1", "epochs is a single value"),
    ("noequals", "use KEY.PATH=VALUE"),
])
def test_bad_overrides_name_the_path(item, fragment):
    with pytest.raises(ConfigError) as info:
        apply_overrides({}, [item])
    assert fragment in str(info.value)


def test_bad_override_value_is_reported_by_validation():
    with pytest.raises(ConfigError, match=r"batch_size: must be >= 1 \(got 0\)"):
        load_config(apply_overrides({"config_version": 1}, ["batch_size=0"]))


def test_set_applies_to_what_another_trainers_file_became(tmp_path):
    """`--set` names our fields: on a kohya_ss or OneTrainer file it changes the imported config
    (before, it went into the file's own keys, where a kohya import ignored it)."""
    import json

    from ot_gradio.config.presets import load_config_argument

    kohya = tmp_path / "kohya.json"
    kohya.write_text(json.dumps({"pretrained_model_name_or_path": "x", "network_dim": 4, "epoch": 2, "train_batch_size": 1}))
    loaded, from_ot = load_config_argument(str(kohya), ["epochs=7", "train_device=cpu", "lora_rank=8"])
    assert (loaded.config.epochs, loaded.config.train_device, loaded.config.lora_rank, from_ot) == (7, "cpu", 8, False)
    assert "train_device" not in loaded.warnings[0]
    onetrainer = tmp_path / "ot.json"
    onetrainer.write_text(json.dumps({"__version": 10, "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "epochs": 3}))
    loaded, from_ot = load_config_argument(str(onetrainer), ["epochs=9"])
    assert loaded.config.epochs == 9 and from_ot
