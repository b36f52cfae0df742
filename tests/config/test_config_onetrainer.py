"""Import of OneTrainer presets and exported configs."""

import json
import shutil
from pathlib import Path

import pytest

from ot_gradio.config.enums import DataType, ModelFormat, ModelType, TimeUnit, TrainingMethod
from ot_gradio.config.io import ConfigError, load_config
from ot_gradio.config.onetrainer import is_onetrainer_config, to_our_layout

DATA = Path(__file__).parent / "data"
OT_PRESETS = sorted((DATA / "onetrainer-presets").glob("*.json"))
FULL = DATA / "onetrainer-full"


def test_all_onetrainer_presets_are_here():
    assert len(OT_PRESETS) == 10


@pytest.mark.parametrize("path", OT_PRESETS, ids=lambda p: p.name)
def test_every_onetrainer_preset_imports(path):
    raw = json.loads(path.read_text())
    assert is_onetrainer_config(raw)
    result = load_config(path)
    config = result.config
    assert config.model_type.value == raw["model_type"]
    assert config.training_method.value == raw["training_method"]
    assert config.output_model_format.value == raw["output_model_format"]
    assert config.resolution == raw["resolution"]
    for part in ("unet", "text_encoder", "text_encoder_2", "vae"):
        for key, value in raw.get(part, {}).items():
            assert str(getattr(getattr(config, part), key)) == str(value), f"{part}.{key}"
    for key in ("batch_size", "learning_rate", "layer_filter_preset", "backup_after", "latent_caching", "masked_training"):
        if key in raw:
            assert getattr(config, key) == raw[key], key
    assert len(result.warnings) <= 1
    assert not any("unknown" in w for w in result.warnings)


def test_sd15_lora_preset_values_survive():
    config = load_config(DATA / "onetrainer-presets" / "sd-1.5-LoRA.json").config
    assert config.unet.weight_dtype == DataType.FLOAT_16
    assert config.text_encoder.weight_dtype == DataType.FLOAT_16
    assert config.vae.weight_dtype == DataType.FLOAT_32
    assert config.output_model_format == ModelFormat.KOHYA_LORA
    assert config.layer_filter_preset == "attn-mlp"
    assert config.training_method == TrainingMethod.LORA and config.model_type == ModelType.STABLE_DIFFUSION_15
    # OneTrainer's default for parts a preset leaves out: text encoder trains for 30 epochs
    assert config.text_encoder.stop_training_after == 30 and config.text_encoder.stop_training_after_unit == TimeUnit.EPOCH


def test_masked_preset_loads_without_warnings():
    result = load_config(DATA / "onetrainer-presets" / "sd-1.5-masked.json")
    assert result.warnings == []  # masked training is supported now
    assert result.config.masked_training and result.config.normalize_masked_area_loss
    assert result.config.max_noising_strength == 0.8


def test_full_export_with_concept_and_sample_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # files are found next to the config, not only in the cwd
    result = load_config(FULL / "config.json")
    config = result.config
    assert [c.name for c in config.concepts] == ["cat", "dog"]
    assert config.concepts[0].seed == -12345 and config.concepts[1].enabled is False
    assert config.concepts[0].image.enable_random_flip and config.concepts[0].text.enable_tag_shuffling
    assert [s.prompt for s in config.samples] == ["a photo of a cat", "a cat on a sofa"]
    assert config.samples[1].noise_scheduler.value == "EULER_A"
    assert config.secrets.huggingface_token == "hf_exampletoken"
    assert config.optimizer_defaults["PRODIGY"].growth_rate == float("inf")
    assert config.optimizer_defaults["ADAMW"].weight_decay == 0.01
    assert config.unet.weight_dtype == DataType.FLOAT_16 and config.output_model_format == ModelFormat.KOHYA_LORA
    assert len(result.warnings) == 1
    warning = result.warnings[0]
    for path in ("cep_gamma", "prefetch_next_batch"):
        assert path in warning
    assert "enable_random_rotate" not in warning  # implemented now: imported and acted on
    assert config.concepts[0].image.enable_random_rotate
    assert "optimizer.stochastic_rounding" not in warning  # ADAMW's own default in OneTrainer
    assert "__version" not in warning


def test_concept_file_relative_to_the_cwd(tmp_path, monkeypatch):
    shutil.copytree(FULL / "training_concepts", tmp_path / "training_concepts")
    data = json.loads((FULL / "config.json").read_text())
    data["samples"] = []
    monkeypatch.chdir(tmp_path)
    config = load_config(data, base_dir=tmp_path / "elsewhere").config
    assert [c.name for c in config.concepts] == ["cat", "dog"]


def test_missing_concept_file_is_a_warning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = load_config({"__version": 11, "concepts": None, "concept_file_name": "nowhere/concepts.json"}, base_dir=tmp_path)
    assert result.config.concepts == []
    assert any("nowhere/concepts.json was not found" in w for w in result.warnings)


def test_broken_concept_file_is_an_error(tmp_path):
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(ConfigError, match="concept_file_name"):
        load_config({"__version": 11, "concepts": None, "concept_file_name": "c.json"}, base_dir=tmp_path)


def test_detection():
    assert is_onetrainer_config({"__version": 11})
    assert is_onetrainer_config({"model_type": "STABLE_DIFFUSION_15"})  # a preset
    assert not is_onetrainer_config({"config_version": 1})


def test_old_onetrainer_layout_is_migrated():
    old = {
        "__version": 0, "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA",
        "optimizer": "ADAMW", "optimizer_weight_decay": 0.05, "optimizer_beta1": 0.8,
        "train_unet": True, "unet_learning_rate": 1e-4, "train_text_encoder_epochs": 5,
        "text_encoder_weight_dtype": "NONE", "weight_dtype": "FLOAT_16", "min_snr_gamma": 5.0,
        "save_after": 3, "save_after_unit": "EPOCH", "lora_layers": "attn", "lora_layer_preset": None,
        "gradient_checkpointing": False, "concepts": [], "samples": [],
    }
    config = load_config(old).config
    assert config.optimizer.weight_decay == 0.05 and config.optimizer.beta1 == 0.8
    assert config.optimizer_defaults["ADAMW"].weight_decay == 0.05
    assert config.unet.learning_rate == 1e-4
    assert config.text_encoder.stop_training_after == 5 and config.text_encoder.stop_training_after_unit == TimeUnit.EPOCH
    assert config.text_encoder.weight_dtype == DataType.FLOAT_16
    assert config.loss_weight_fn.value == "MIN_SNR_GAMMA" and config.loss_weight_strength == 5.0
    assert config.save_every == 3 and config.save_every_unit == TimeUnit.EPOCH
    assert config.layer_filter == "attn" and config.layer_filter_preset == "full"
    assert config.unet.gradient_checkpointing == "OFF" and config.text_encoder.gradient_checkpointing == "OFF"  # OneTrainer's false: OFF, not AUTO


def test_newer_onetrainer_renames_are_undone():
    data = to_our_layout({"__version": 12, "caching_threads": 4, "image_caching": False, "text_caching": True,
                          "optimizer": {"__version": 1, "optimizer": "ADAMW", "orthogonal_gradient": "disabled"},
                          "optimizer_defaults": {"SOMETHING_NEW": {"optimizer": "SOMETHING_NEW"}}})
    assert data["dataloader_threads"] == 4 and data["latent_caching"] is False
    assert data["optimizer"] == {"optimizer": "ADAMW", "orthogonal_gradient": False}
    assert data["optimizer_defaults"] == {}


def test_invalid_onetrainer_value_is_an_error():
    with pytest.raises(ConfigError, match=r"model_type: must be one of .*STABLE_DIFFUSION_15.*\(got 'NOT_A_MODEL'\)"):
        load_config({"__version": 11, "model_type": "NOT_A_MODEL"})


@pytest.mark.parametrize("model_type", ["QWEN", "STABLE_DIFFUSION_XL_10_BASE"])
def test_a_version_10_config_with_cpu_offloaded_checkpointing_offloads_what_can_be_and_starts(model_type):
    """OneTrainer before version 11 had one global CPU_OFFLOADED: it goes to the parts offloading
    works on (the denoiser and the text encoders), not the VAE, which the doctor would refuse."""
    from ot_gradio.config.doctor import errors
    from ot_gradio.config.families import family_info

    old = {"__version": 10, "model_type": model_type, "training_method": "LORA", "gradient_checkpointing": "CPU_OFFLOADED",
           "layer_offload_fraction": 0.5, "enable_activation_offloading": True,
           **{part: {"train": part != "vae"} for part in family_info(model_type).parts}}
    config = load_config(old).config
    info = family_info(model_type)
    assert getattr(config, info.denoiser).offload_fraction == 0.5 and getattr(config, info.denoiser).activation_offloading
    assert config.vae.offload_fraction == 0.0 and not config.vae.activation_offloading and config.vae.gradient_checkpointing
    assert not [e for e in errors(config) if "offload" in e]


def test_onetrainers_old_concepts_keep_their_repeats_and_validation_inline_and_in_a_concepts_file(tmp_path, monkeypatch):
    """OneTrainer's concept versions: 0's `repeats` is `balancing`, 1's `validation_concept` is
    `type` (held-out images stay held out, not trained)."""
    from ot_gradio.config.enums import ConceptType

    old = [{"__version": 0, "name": "a", "path": str(tmp_path), "repeats": 3.0, "validation_concept": False},
           {"__version": 1, "name": "b", "path": str(tmp_path), "balancing": 2.0, "validation_concept": True},
           {"__version": 2, "name": "c", "path": str(tmp_path), "type": "STANDARD", "balancing": 4.0}]
    inline = load_config({"__version": 6, "training_method": "LORA", "concepts": old})
    (tmp_path / "concepts.json").write_text(json.dumps(old))
    monkeypatch.chdir(tmp_path)
    from_file = load_config({"__version": 6, "training_method": "LORA", "concept_file_name": "concepts.json"})
    for result in (inline, from_file):
        got = [(c.balancing, c.type) for c in result.config.concepts]
        assert got == [(3.0, ConceptType.STANDARD), (2.0, ConceptType.VALIDATION), (4.0, ConceptType.STANDARD)]
        assert not any("validation_concept" in w or "repeats" in w for w in result.warnings), result.warnings


def test_a_lora_config_migrated_by_newer_onetrainer_writes_its_safetensors_layout():
    """OneTrainer's migration renames a SAFETENSORS LoRA to LEGACY_LORA: written as SAFETENSORS is."""
    from ot_gradio.config.doctor import errors
    from ot_gradio.config.families import lora_layout

    config = load_config({"__version": 11, "model_type": "STABLE_DIFFUSION_XL_10_BASE", "training_method": "LORA",
                          "output_model_format": "LEGACY_LORA"}).config
    assert config.output_model_format == ModelFormat.LEGACY_LORA and not [e for e in errors(config) if "output_model_format" in e]
    assert lora_layout("STABLE_DIFFUSION_XL_10_BASE", "LEGACY_LORA") == "kohya" and lora_layout("FLUX_DEV_1", "LEGACY_LORA") == "diffusers"


def test_a_modelscope_flux2_folder_is_not_taken_for_flux1():
    from ot_gradio.config.base_model_match import base_model_mismatch

    assert base_model_mismatch("FLUX_2", r"O:\onetrainer\model\black-forest-labs\FLUX___2-klein-base-9B") is None
    assert "Flux.2" in base_model_mismatch("FLUX_DEV_1", r"O:\models\FLUX___2-klein-base-9B")


def test_what_published_user_configs_hold_imports_as_onetrainer_reads_it():
    """From configs users published (an audit of 17): a file saved before OneTrainer wrote a
    version, retired attention mechanisms, numbers in text fields, nulls; each as OneTrainer's
    from_dict takes it."""
    from ot_gradio.config.doctor import errors

    flat = load_config({"model_type": "STABLE_DIFFUSION_XL_10_BASE", "training_method": "LORA", "optimizer": "ADAMW_8BIT",
                        "optimizer_weight_decay": 0.02, "train_unet": True, "unet_learning_rate": 2e-4, "train_text_encoder": False})
    c = flat.config  # no __version, the first layout: OneTrainer reads it as version 0 and migrates it
    assert (c.optimizer.optimizer.value, c.optimizer.weight_decay, c.unet.learning_rate, c.text_encoder.train) == (
        "ADAMW_8BIT", 0.02, 2e-4, False)
    for mechanism in ("XFORMERS", "DEFAULT"):  # today's OneTrainer has neither and runs SDP
        loaded = load_config({"__version": 6, "model_type": "STABLE_DIFFUSION_XL_10_BASE", "training_method": "LORA",
                              "attention_mechanism": mechanism})
        assert loaded.config.attention_mechanism.value == "SDP" and any(f"{mechanism} -> SDP" in w for w in loaded.warnings)
    typed = load_config({"__version": 11, "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "resolution": 512,
                         "lora_alpha": None, "learning_rate_warmup_steps": None,
                         "concepts": [{"path": "/data", "image": {"resolution_override": 768}}], "samples": [{"prompt": "a", "seed": None}]})
    c = typed.config
    assert (c.resolution, c.concepts[0].image.resolution_override, c.lora_alpha, c.learning_rate_warmup_steps, c.samples[0].seed) == (
        "512", "768", 1.0, 200.0, 42)
    assert any(w.startswith("learning_rate_warmup_steps, lora_alpha, samples.0.seed: null") for w in typed.warnings)
    # Flux DoRA saved as SAFETENSORS (diffusers keys there): refused before the model loads, not after
    dora = load_config({"__version": 6, "model_type": "FLUX_DEV_1", "training_method": "LORA", "lora_decompose": True,
                        "output_model_format": "SAFETENSORS"}).config
    assert any(e.startswith("output_model_format: SAFETENSORS writes diffusers/PEFT keys for FLUX_DEV_1") for e in errors(dora))
    assert not [e for e in errors(dora.model_copy(update={"output_model_format": ModelFormat.KOHYA_LORA})) if "DoRA" in e]


def test_with_accumulation_a_onetrainer_configs_batch_counted_steps_become_optimizer_steps():
    """OneTrainer counts a step per batch: with accumulation 4 its warmup of 200 is 50 optimizer steps
    (int(200 / 4) in its scheduler), and sampling every 100 steps samples every 25 optimizer steps."""
    raw = {"__version": 11, "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "gradient_accumulation_steps": 4,
           "learning_rate_warmup_steps": 200, "sample_after": 100, "sample_after_unit": "STEP", "sample_skip_first": 40,
           "save_every": 10, "save_every_unit": "STEP", "backup_after": 30, "backup_after_unit": "MINUTE",
           "validate_after": 2, "validate_after_unit": "STEP",
           "text_encoder": {"stop_training_after": 30, "stop_training_after_unit": "STEP"},
           "unet": {"stop_training_after": 30, "stop_training_after_unit": "EPOCH"},
           "embedding": {"stop_training_after": 6, "stop_training_after_unit": "STEP"},
           "additional_embeddings": [{"placeholder": "<x>", "stop_training_after": 1, "stop_training_after_unit": "STEP"}]}
    result = load_config(raw)
    c = result.config
    assert c.learning_rate_warmup_steps == 50
    assert (c.sample_after, c.sample_skip_first, c.save_every, c.validate_after) == (25, 10, 3, 1)  # 10 / 4 -> 3, nearest
    assert c.backup_after == 30 and c.unet.stop_training_after == 30  # minutes and epochs are the same there
    assert c.text_encoder.stop_training_after == 8 and c.embedding.stop_training_after == 2
    assert c.additional_embeddings[0].stop_training_after == 1  # a step at least
    note = next(w for w in result.warnings if w.startswith("gradient_accumulation_steps 4"))
    assert "learning_rate_warmup_steps 200 -> 50" in note and "text_encoder.stop_training_after 30 -> 8" in note
    assert "additional_embeddings" not in note  # 1 stays 1

    assert load_config({**raw, "learning_rate_warmup_steps": 6}).config.learning_rate_warmup_steps == 0  # int(6 / 4): 1 step
    assert load_config({**raw, "gradient_accumulation_steps": 4.0}).config.learning_rate_warmup_steps == 50  # as validation reads 4.0
    assert load_config({**raw, "learning_rate_warmup_steps": 0.1}).config.learning_rate_warmup_steps == 0.1  # a fraction
    same = load_config({**raw, "gradient_accumulation_steps": 1})
    assert (same.config.learning_rate_warmup_steps, same.config.sample_after) == (200, 100)
    assert not any(w.startswith("gradient_accumulation_steps") for w in same.warnings)
    ours = load_config({**{k: v for k, v in raw.items() if k != "__version"}, "config_version": 2})  # ours count optimizer steps
    assert ours.config.learning_rate_warmup_steps == 200


@pytest.mark.parametrize("model_type", ["Z_IMAGE", "FLUX_2", "IDEOGRAM_4"])
def test_a_text_encoder_onetrainer_never_trains_stays_frozen(model_type):
    """OneTrainer's LoRA and fine-tune of these model types keep the text encoder frozen whatever
    `text_encoder.train` says (its default is on); here it would have trained, unasked."""
    result = load_config({"__version": 11, "model_type": model_type, "training_method": "FINE_TUNE"})
    assert result.config.text_encoder.train is False
    assert any(w.startswith(f"text_encoder.train: OneTrainer never trains the text encoder of {model_type}") for w in result.warnings)
    quiet = load_config({"__version": 11, "model_type": model_type, "training_method": "LORA", "text_encoder": {"train": False}})
    assert quiet.config.text_encoder.train is False and not any(w.startswith("text_encoder.train") for w in quiet.warnings)
    qwen = load_config({"__version": 11, "model_type": "QWEN", "training_method": "FINE_TUNE"})  # OneTrainer trains Qwen's
    assert qwen.config.text_encoder.train is True


def test_the_embedding_switch_onetrainer_ignores_for_sd_is_on():
    """OneTrainer's SD 1.x/2.x setups train the embeddings whatever `text_encoder.train_embedding`
    says; off here, an EMBEDDING run was refused and a LoRA's additional embedding stayed frozen."""
    off = {"__version": 11, "training_method": "EMBEDDING", "text_encoder": {"train_embedding": False}}
    result = load_config({**off, "model_type": "STABLE_DIFFUSION_15"})
    assert result.config.text_encoder.train_embedding is True
    assert any(w.startswith("text_encoder.train_embedding: off, which OneTrainer ignores") for w in result.warnings)
    assert load_config({**off, "model_type": "PIXART_SIGMA"}).config.text_encoder.train_embedding is False  # read there


def test_a_token_count_above_75_imports_for_t5():
    config = load_config({"__version": 11, "model_type": "FLUX_DEV_1", "training_method": "EMBEDDING",
                          "embedding": {"token_count": 100}}).config
    assert config.embedding.token_count == 100


def test_a_layer_preset_of_onetrainers_page_we_lack_keeps_its_filter():
    config = load_config({"__version": 11, "model_type": "WUERSTCHEN_2", "training_method": "LORA",
                          "layer_filter_preset": "down-blocks", "layer_filter": "down_blocks"}).config
    assert (config.layer_filter_preset, config.layer_filter) == ("custom", "down_blocks")
