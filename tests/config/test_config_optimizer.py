"""The optimizer's page keys, effective settings, and the doctor's optimizer and scheduler checks."""

import json
from pathlib import Path

from ot_gradio.config.concept import ConceptConfig
from ot_gradio.config.doctor import check, errors
from ot_gradio.config.enums import LearningRateScheduler as S
from ot_gradio.config.enums import ModelFormat, ModelType, TrainingMethod
from ot_gradio.config.optimizer import (
    WORKING_DEFAULTS,
    OptimizerConfig,
    effective_settings,
    optimizer_keys,
    optimizer_param_defaults,
    optimizer_problems,
)
from ot_gradio.config.parts import SampleConfig
from ot_gradio.config.schema import TrainConfig

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "onetrainer-optimizer-defaults.json"


def config(**kw) -> TrainConfig:
    base = dict(training_method=TrainingMethod.LORA, output_model_format=ModelFormat.KOHYA_LORA,
                concepts=[ConceptConfig(name="a", path="data/a")], samples=[SampleConfig(prompt="a cat")])
    return TrainConfig(**{**base, **kw})


def with_optimizer(name: str, cfg: TrainConfig | None = None, **settings) -> TrainConfig:
    cfg = cfg or config()
    cfg.optimizer = OptimizerConfig(optimizer=name, **settings)
    return cfg


def test_optimizer_keys_are_the_defaults_table_row_in_schema_order():
    keys = optimizer_keys("PRODIGY")
    assert set(keys) == set(optimizer_param_defaults("PRODIGY"))
    assert {"d_coef", "d0", "beta3", "safeguard_warmup", "use_bias_correction", "growth_rate", "fsdp_in_use"} <= set(keys)
    order = list(OptimizerConfig.model_fields)
    assert keys == sorted(keys, key=order.index)
    assert "relative_step" in optimizer_keys("ADAFACTOR") and "momentum" not in optimizer_keys("ADAMW")
    assert optimizer_keys("NOPE") == []


def test_the_defaults_table_is_onetrainers():
    table = json.loads((Path(__file__).resolve().parents[2] / "ot_gradio/config/optimizer_defaults.json").read_text())
    if REFERENCE.exists():
        assert table == json.loads(REFERENCE.read_text())
    # only what the libraries refuse differs from it
    for name, fixes in WORKING_DEFAULTS.items():
        assert optimizer_param_defaults(name) == {**table[name], **fixes}


def test_effective_settings_fill_blanks_from_the_table():
    settings = effective_settings(OptimizerConfig(optimizer="PRODIGY", d_coef=2.0))
    assert settings["d_coef"] == 2.0 and settings["d0"] == 1e-6 and settings["growth_rate"] == float("inf")


def test_library_limits_name_the_field():
    assert optimizer_problems(OptimizerConfig(optimizer="SGD_8BIT", momentum=0)) == [
        "optimizer.momentum: bitsandbytes' SGD_8BIT needs momentum above 0 (0.9 is usual)"]
    assert optimizer_problems(OptimizerConfig(optimizer="SGD_8BIT")) == []  # the working default
    assert any(p.startswith("optimizer.warmup_init") for p in optimizer_problems(OptimizerConfig(optimizer="ADAFACTOR", warmup_init=True)))
    assert errors(with_optimizer("SCHEDULE_FREE_SGD", momentum=1.0))[0].startswith("optimizer.momentum")


def test_a_plain_config_has_no_errors_and_no_optimizer_warnings():
    assert errors(config()) == []
    assert check(config()) == []


def test_prodigy_learning_rates_must_be_one_and_equal():
    cfg = with_optimizer("PRODIGY", config(learning_rate=1.0, learning_rate_warmup_steps=0))
    assert check(cfg) == []
    cfg.text_encoder.learning_rate = 0.5
    warning = next(w for w in check(cfg) if "PRODIGY" in w)
    assert "text_encoder 0.5" in warning and "unet 1" in warning
    assert '"Learning Rate should be 1 and must be the same for both text encoders and unet. Otherwise, the lora will do nothing."' in warning
    cfg.text_encoder.learning_rate = None
    cfg.learning_rate = 3e-4
    assert any("set every learning rate to 1" in w for w in check(cfg))
    cfg.text_encoder.train = False  # only the parts that train count
    cfg.learning_rate, cfg.text_encoder.learning_rate = 1.0, 0.5
    assert not any("PRODIGY" in w and "learning rate" in w for w in check(cfg))
    cfg.learning_rate_scaler = "BOTH"  # its learning rates are then sqrt(batch x accumulation), not 1
    assert any("learning_rate_scaler BOTH multiplies its learning rates" in w and "set it to NONE" in w for w in check(cfg))


def test_warmup_with_rex_or_prodigy():
    cfg = config(learning_rate_scheduler=S.REX, learning_rate_warmup_steps=100)
    assert any("Warmup (100) with the REX scheduler" in w for w in check(cfg))
    cfg = with_optimizer("PRODIGY", config(learning_rate=1.0, learning_rate_warmup_steps=0.05))
    assert any("Prodigy has its own warmup method" in w for w in check(cfg))
    cfg.learning_rate_warmup_steps = 0
    assert check(cfg) == []


def test_adafactor_constant_mode_with_relative_step_is_an_error():
    cfg = with_optimizer("ADAFACTOR", config(learning_rate_scheduler=S.COSINE), relative_step=True, scale_parameter=True)
    [error] = errors(cfg)
    assert error.startswith("optimizer.relative_step: Adafactor with the COSINE scheduler is the low-memory AdamW mode")
    assert '"Required to be FALSE"' in error and "relative_step and scale_parameter" in error
    cfg.optimizer.relative_step = False
    assert errors(cfg)[0].startswith("optimizer.scale_parameter")
    cfg.optimizer.scale_parameter = False
    assert errors(cfg) == []
    adaptive = with_optimizer("ADAFACTOR", config(learning_rate_scheduler=S.ADAFACTOR), relative_step=True, scale_parameter=True)
    assert errors(adaptive) == [] and check(adaptive) == []
    adaptive.optimizer.relative_step = False
    assert any("The ADAFACTOR scheduler goes with adaptive Adafactor" in w for w in check(adaptive))


def test_adafactor_scheduler_needs_adafactor_and_custom_needs_a_class():
    assert errors(config(learning_rate_scheduler=S.ADAFACTOR))[0].startswith("learning_rate_scheduler: the ADAFACTOR scheduler")
    assert errors(config(learning_rate_scheduler=S.CUSTOM))[0].startswith("custom_learning_rate_scheduler:")
    assert errors(config(learning_rate_scheduler=S.CUSTOM, custom_learning_rate_scheduler="torch.optim.lr_scheduler.StepLR")) == []


def test_fused_back_pass_with_gradient_accumulation_runs_as_onetrainer():
    """OneTrainer runs it (its hooks step at a window's last batch, with a warning that it saves no
    memory then); refused here before."""
    cfg = with_optimizer("ADAFACTOR", config(gradient_accumulation_steps=4), fused_back_pass=True)
    assert errors(cfg) == []
    assert not any("clip grad norm" in w for w in check(cfg))  # each weight's gradient is clipped on its own
    prodigy = with_optimizer("PRODIGY", config(gradient_accumulation_steps=4, learning_rate=1.0, learning_rate_warmup_steps=0),
                             fused_back_pass=True)
    assert errors(prodigy) == []  # PRODIGY has no fused back pass: ignored, with a warning
    assert any("PRODIGY does not offer it" in w and "PRODIGY_ADV" in w for w in check(prodigy))


def test_lora_alpha_above_rank():
    assert any("LoRA alpha 32 is above the rank 16" in w and "alpha/rank = 2" in w for w in check(config(lora_alpha=32, lora_rank=16)))
    assert not any("LoRA alpha" in w for w in check(config(lora_alpha=16, lora_rank=16)))
    assert not any("LoRA alpha" in w for w in check(config(lora_alpha=32, lora_rank=16, peft_type="OFT_2")))  # OFT: unused
    embedding = config(lora_alpha=32, lora_rank=16, training_method=TrainingMethod.FINE_TUNE, model_type=ModelType.STABLE_DIFFUSION_15)
    assert not any("LoRA alpha" in w for w in check(embedding))


def test_schedule_free_ignores_the_scheduler_and_ignored_library_settings():
    cfg = with_optimizer("SCHEDULE_FREE_ADAMW", config(learning_rate_scheduler=S.COSINE))
    assert any("schedule-free" in w and "COSINE scheduler and the warmup are ignored" in w for w in check(cfg))
    lamb = with_optimizer("LAMB", bias_correction=False)
    assert any(w.startswith("optimizer.bias_correction: bitsandbytes' LAMB always corrects the bias") for w in check(lamb))
    # settings of OneTrainer's table that the installed library lacks: a warning naming the field
    assert any(w.startswith("optimizer.adanorm: pytorch-optimizer 4.1's YOGI has no AdaNorm") for w in check(with_optimizer("YOGI", adanorm=True)))
    assert any(w.startswith("optimizer.amsgrad:") for w in check(with_optimizer("ADABELIEF", amsgrad=True)))
    assert not any(w.startswith("optimizer.adanorm") for w in check(with_optimizer("AIDA", adanorm=True)))  # AIDA has it
