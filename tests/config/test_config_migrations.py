"""Versioned migrations: every version from 0 up loads."""

from pathlib import Path

from ot_gradio.config.io import load_config
from ot_gradio.config.migrations import MIGRATIONS, migrate
from ot_gradio.config.schema import CONFIG_VERSION

DATA = Path(__file__).parent / "data"


def test_every_version_has_a_migration():
    assert sorted(MIGRATIONS) == list(range(CONFIG_VERSION))


def test_migration_from_version_0_dict():
    old = {"__version": 11, "concepts": None, "samples": None, "additional_embeddings": None,
           "scheduler_params": None, "unet": {"__version": 0, "train": True}, "learning_rate": 1e-4}
    new = migrate(old)
    assert new["config_version"] == CONFIG_VERSION
    assert new["concepts"] == [] and new["samples"] == [] and new["additional_embeddings"] == [] and new["scheduler_params"] == []
    assert "__version" not in new and "__version" not in new["unet"]
    assert old["concepts"] is None  # the input is not changed


def test_migration_from_version_0_file():
    result = load_config(DATA / "v0" / "config.json")
    config = result.config
    assert config.config_version == CONFIG_VERSION
    assert config.lora_rank == 8 and config.concepts[0].name == "cat"
    assert config.concepts[0].image.enable_random_flip is True
    assert config.concepts[0].text.prompt_path == "data/cat.txt"
    assert config.samples == [] and config.additional_embeddings == []


def test_current_version_is_unchanged():
    data = {"config_version": CONFIG_VERSION, "epochs": 3}
    assert migrate(data) == data


def test_a_version_2_fine_tune_keeps_training_every_weight():
    """Before version 3 a FINE_TUNE ignored the layer preset (often a LoRA preset's attn-mlp) and
    trained every weight; it still does. A OneTrainer fine-tune always read it, and keeps it."""
    ours = migrate({"config_version": 2, "training_method": "FINE_TUNE", "layer_filter_preset": "attn-mlp"})
    assert ours["layer_filter_preset"] == "full"
    assert migrate({"config_version": 2, "training_method": "LORA", "layer_filter_preset": "attn-mlp"})["layer_filter_preset"] == "attn-mlp"
    theirs = migrate({"__version": 11, "training_method": "FINE_TUNE", "layer_filter_preset": "blocks", "layer_filter": "transformer_block"})
    assert theirs["layer_filter_preset"] == "blocks"
