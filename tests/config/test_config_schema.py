"""The schema holds every OneTrainer key, each with a label, a tooltip and the right status."""

import re
from pathlib import Path

import pytest

from ot_gradio.config.concept import ConceptConfig, ConceptImageConfig, ConceptTextConfig
from ot_gradio.config.fields import PLANNED, iter_fields
from ot_gradio.config.optimizer import OptimizerConfig, optimizer_param_defaults
from ot_gradio.config.parts import EmbeddingConfig, ModelPartConfig, QuantizationConfig, SampleConfig
from ot_gradio.config.schema import TrainConfig

DATA = Path(__file__).parent / "data"
SECTIONS = {
    "TrainOptimizerConfig": OptimizerConfig, "TrainModelPartConfig": ModelPartConfig,
    "TrainEmbeddingConfig": EmbeddingConfig, "QuantizationConfig": QuantizationConfig, "TrainConfig": TrainConfig,
    "ConceptImageConfig": ConceptImageConfig, "ConceptTextConfig": ConceptTextConfig, "ConceptConfig": ConceptConfig,
    "SampleConfig": SampleConfig,
}


def onetrainer_keys() -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    section = None
    for line in (DATA / "onetrainer-config-keys.md").read_text().splitlines():
        if m := re.match(r"## (\w+)", line):
            section = keys.setdefault(m.group(1), [])
        elif (m := re.match(r"\| (\w+) \|", line)) and section is not None and m.group(1) != "key":
            section.append(m.group(1))
    return keys


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_onetrainer_key_is_in_the_schema(section):
    keys = onetrainer_keys()[section]
    assert keys
    missing = [k for k in keys if k not in SECTIONS[section].model_fields]
    assert missing == []


def test_optimizer_has_all_keys():
    assert len(OptimizerConfig.model_fields) >= 100


def test_every_field_has_label_and_tooltip():
    fields = list(iter_fields(TrainConfig))
    assert len(fields) > 400
    bad = [f.path for f in fields if not f.label.strip() or not f.tooltip.strip()]
    assert bad == []
    assert all(f.tab for f in fields if f.path != "config_version")


def test_iter_fields_describes_fields():
    by_path = {f.path: f for f in iter_fields(TrainConfig)}
    assert by_path["batch_size"].bounds == {"ge": 1, "le": 1024}
    assert by_path["batch_size"].tab == "training"
    assert "ADAMW" in by_path["optimizer.optimizer"].choices
    assert by_path["layer_filter_preset"].choices == ["full", "attn-mlp", "attn-only", "blocks", "custom"]
    assert by_path["concepts"].group and by_path["concepts[].image.enable_random_flip"].tab == "concepts"
    # nested defaults are the parent's: OneTrainer stops the text encoder after 30 epochs
    assert by_path["text_encoder.stop_training_after"].default == 30
    assert by_path["unet.stop_training_after"].default is None
    # a PLANNED group makes everything in it PLANNED
    assert by_path["unconditional_transformer.train"].status == PLANNED
    assert by_path["text_encoder_2.train"].status != PLANNED  # SDXL
    assert by_path["embedding.is_output_embedding"].status != PLANNED
    assert by_path["embedding.placeholder"].status != PLANNED
    assert by_path["seed"].default == 42


OK_PART = {"train", "learning_rate", "weight_dtype", "gradient_checkpointing", "stop_training_after", "stop_training_after_unit",
           "dropout_probability", "train_embedding", "guidance_scale", "offload_fraction", "activation_offloading",
           "attention_mask", "model_name", "include"}  # kept, not shown: OneTrainer reads only the transformer's attention mask and
# the model names of the parts that show theirs (their own, acted-on fields); beta1 warmup is given to no optimizer
OK_OPTIMIZER = {"optimizer", "beta1", "beta1_warmup", "min_beta1", "beta2", "eps", "weight_decay", "amsgrad", "foreach", "fused", "maximize", "momentum",
                "dampening", "nesterov", "alpha", "centered", "lr_decay", "initial_accumulator_value", "capturable", "differentiable",
                # bitsandbytes, D-Adaptation, Prodigy, Adafactor, schedule-free, Lion; two settings act around the optimizer
                "adam_w_mode", "beta3", "bias_correction", "clip_threshold", "d0", "d_coef", "decay_rate", "decouple", "eps2",
                "fsdp_in_use", "growth_rate", "is_paged", "log_every", "max_unorm", "min_8bit_size", "no_prox", "optim_bits", "r",
                "relative_step", "safeguard_warmup", "scale_parameter", "use_bias_correction", "use_triton", "warmup_init",
                "weight_lr_power", "slice_p", "stochastic_rounding", "fused_back_pass", "percentile_clipping",
                # pytorch-optimizer's ADOPT, ADABELIEF, TIGER, AIDA, YOGI
                "decoupled_decay", "fixed_decay", "rectify", "degenerated_to_sgd", "k", "xi", "n_sma_threshold", "ams_bound", "adanorm",
                "adam_debias", "cautious", "initial_accumulator",
                # Prodigy Plus schedule-free
                "weight_decay_by_lr", "prodigy_steps", "use_speed", "split_groups", "split_groups_mean", "factored", "factored_fp32",
                "use_stableadamw", "use_cautious", "use_grams", "use_adopt", "d_limiter", "use_schedulefree", "use_orthograd", "schedulefree_c",
                # adv-optm's *_ADV
                "nnmf_factor", "orthogonal_gradient", "use_atan2", "use_AdEMAMix", "beta3_ema", "alpha_grad", "Simplified_AdEMAMix",
                "kourkoutas_beta", "cautious_wd", "auto_kappa_p", "compile",
                # the Muon ones
                "ns_steps", "MuonWithAuxAdam", "muon_hidden_layers", "muon_adam_regex", "muon_adam_lr", "muon_te1_adam_lr", "muon_te2_adam_lr",
                "muon_adam_config", "rms_rescaling", "normuon_variant", "beta2_normuon", "low_rank_ortho", "ortho_rank", "accelerated_ns",
                "approx_mars",
                # CAME_8BIT
                "quant_block_size"}


def test_status_of_model_part_and_optimizer_fields():
    part = {f.path for f in iter_fields(ModelPartConfig) if f.status != PLANNED}
    assert part == OK_PART
    assert next(f for f in iter_fields(ModelPartConfig) if f.path == "attention_mask").compat
    optimizer = {f.path for f in iter_fields(OptimizerConfig) if f.status != PLANNED}
    assert optimizer == OK_OPTIMIZER


def test_new_model_parts_are_planned_and_core_ones_are_not():
    by_path = {f.path: f for f in iter_fields(TrainConfig)}
    for name in ("unconditional_transformer", "cloud"):
        assert by_path[name].status == PLANNED, name
    for name in ("unet", "text_encoder", "text_encoder_2", "vae", "optimizer", "concepts", "samples", "seed", "lora_rank", "embedding",
                 "additional_embeddings", "embedding_learning_rate", "preserve_embedding_norm", "embedding_weight_dtype",
                 "bundle_additional_embeddings", "text_encoder_3", "quantization", "quantization.layer_filter",
                 "quantization.svd_dtype", "quantization.svd_rank", "quantization.cache_dir",
                 "prior", "effnet_encoder", "decoder", "decoder_text_encoder", "decoder_vqgan", "transformer", "text_encoder_4"):
        assert by_path[name].status != PLANNED, name
    # Würstchen / Stable Cascade load these parts from models of their own, every family its VAE,
    # HiDream its Llama (as OneTrainer), Flux.1, Chroma and SD 3 their text encoders (files as ComfyUI's);
    # other parts cannot yet
    for name in ("prior", "decoder", "effnet_encoder", "vae", "text_encoder_4", "text_encoder", "text_encoder_2", "text_encoder_3"):
        assert by_path[f"{name}.model_name"].status != PLANNED, name
    assert not by_path["text_encoder.model_name"].compat and by_path["text_encoder.model_name"].applies_when is not None
    for name in ("unet", "decoder_vqgan", "decoder_text_encoder"):  # OneTrainer loads them from no other model either
        assert by_path[f"{name}.model_name"].compat and by_path[f"{name}.model_name"].status != PLANNED, name


def test_partial_group_keeps_the_fields_default():
    config = TrainConfig.model_validate({"text_encoder": {"weight_dtype": "FLOAT_16"},
                                         "unconditional_transformer": {"include": False},
                                         "cloud": {"enabled": True}})
    assert config.text_encoder.stop_training_after == 30
    assert config.unconditional_transformer.train is False
    assert config.cloud["enabled"] is True and config.cloud["name"] == "OneTrainer"


def test_defaults_follow_onetrainer_except_device():
    config = TrainConfig()
    assert config.train_device == "cuda"
    assert config.learning_rate == 3e-6 and config.learning_rate_warmup_steps == 200.0
    assert config.optimizer.stochastic_rounding is True and config.optimizer.foreach is True  # ours: the fast step
    assert config.text_encoder_2_sequence_length == 77 and config.tensorboard_port == 6006
    assert config.embedding.placeholder == "<embedding>"
    assert config.embedding.uuid != TrainConfig().embedding.uuid


def test_optimizer_param_defaults():
    assert optimizer_param_defaults("ADAMW")["weight_decay"] == 0.01
    assert optimizer_param_defaults("NOPE") == {}


def test_config_package_never_imports_torch():
    import subprocess
    import sys

    code = ("import sys; import ot_gradio.config.io, ot_gradio.config.doctor, ot_gradio.config.presets; "
            "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'diffusers', 'transformers')]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
