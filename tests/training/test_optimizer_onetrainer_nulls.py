"""A OneTrainer config whose optimizer section is all null (as OneTrainer writes the settings its
page left unset) trains with the values OneTrainer's create.py passes for null, not our defaults."""

from __future__ import annotations

import math

import pytest
import torch

from ot_gradio.config.enums import Optimizer as O
from ot_gradio.config.io import load_config
from ot_gradio.config.optimizer import OptimizerConfig, effective_settings
from ot_gradio.config.ot_optimizer import SPEED_ONLY
from ot_gradio.training.optimizers import LIBRARY_LACKS, NOT_CONSTRUCTOR_ARGS, OPTIMIZERS, create_optimizer, resolve_settings

INF = float("inf")
# What OneTrainer's modules/util/create.py (create_optimizer) passes for a null setting
# (`x if x is not None else <fallback>`), per optimizer, in config keys; None: it passes None.
# A switch it passes on raw or only tests for truth (stochastic_rounding of ADAM(W), Adafactor,
# CAME and adv-optm) is off.
ADAM = dict(beta1=0.9, beta2=0.999, weight_decay=0, eps=1e-8, amsgrad=False, foreach=False, maximize=False,
            capturable=False, differentiable=False, fused=False, stochastic_rounding=False, fused_back_pass=False)
BNB = dict(beta1=0.9, beta2=0.999, weight_decay=0, eps=1e-8, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False)
ADEMAMIX = dict(beta1=0.9, beta2=0.999, beta3=0.9999, weight_decay=1e-2, eps=1e-8, alpha=5, min_8bit_size=4096, is_paged=False)
ADAGRAD = dict(weight_decay=0, eps=1e-10, lr_decay=0, initial_accumulator_value=0)
RMSPROP = dict(weight_decay=0, eps=1e-8, alpha=0.99, momentum=0, centered=False)
LARS = dict(weight_decay=0, momentum=0, dampening=0, nesterov=False, max_unorm=0.02)
LAMB = dict(bias_correction=True, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0, amsgrad=False, adam_w_mode=True,
            min_8bit_size=4096, percentile_clipping=100, block_wise=False, max_unorm=1.0)
ADV = dict(weight_decay=0.0, nnmf_factor=False, cautious_wd=False, stochastic_rounding=False, orthogonal_gradient=False, compile=False)
SIMPLIFIED = dict(Simplified_AdEMAMix=False, alpha_grad=100)
CAME = dict(eps=1e-30, eps2=1e-16, beta1=0.9, beta2=0.999, beta3=0.9999, weight_decay=0, stochastic_rounding=False)
MUON_ADV = dict(ns_steps=5, rms_rescaling=True, nesterov=True, low_rank_ortho=False, ortho_rank=128, normuon_variant=False,
                accelerated_ns=False, approx_mars=False)
CREATE_PY = {
    "SGD": dict(momentum=0, dampening=0, weight_decay=0, nesterov=False, foreach=False, maximize=False, differentiable=False),
    "SGD_8BIT": dict(momentum=0, dampening=0, weight_decay=0, nesterov=False),
    "ADAM": ADAM, "ADAMW": {**ADAM, "weight_decay": 1e-2},
    "ADAM_8BIT": BNB, "ADAMW_8BIT": {**BNB, "weight_decay": 1e-2},
    "AdEMAMix_8BIT": ADEMAMIX, "AdEMAMix": {**ADEMAMIX, "optim_bits": 32},
    "ADAGRAD": ADAGRAD, "ADAGRAD_8BIT": {**ADAGRAD, "min_8bit_size": 4096, "percentile_clipping": 100, "block_wise": True},
    "RMSPROP": RMSPROP, "RMSPROP_8BIT": {**RMSPROP, "min_8bit_size": 4096, "percentile_clipping": 100, "block_wise": True},
    "LION": dict(beta1=0.9, beta2=0.99, weight_decay=0, use_triton=False),
    "LARS": LARS, "LARS_8BIT": {**LARS, "min_8bit_size": 4096, "percentile_clipping": 100},
    "LAMB": {**LAMB, "optim_bits": 32}, "LAMB_8BIT": LAMB,
    "LION_8BIT": dict(weight_decay=0, beta1=0.9, beta2=0.999, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False),
    "SCHEDULE_FREE_ADAMW": dict(beta1=0.9, beta2=0.999, weight_decay=1e-2, eps=1e-8, r=0, weight_lr_power=2.0, foreach=False),
    "SCHEDULE_FREE_SGD": dict(momentum=0, weight_decay=0, r=0, weight_lr_power=2.0, foreach=False),
    "DADAPT_SGD": dict(momentum=0.0, weight_decay=0, log_every=0, d0=1e-6, growth_rate=INF, fsdp_in_use=False),
    "DADAPT_ADAM": dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0, log_every=0, decouple=False, use_bias_correction=False,
                        d0=1e-6, growth_rate=INF, fsdp_in_use=False),
    "DADAPT_ADAN": dict(beta1=0.98, beta2=0.92, beta3=0.99, eps=1e-8, weight_decay=0.02, no_prox=False, log_every=0, d0=1e-6,
                        growth_rate=INF),
    "DADAPT_ADA_GRAD": dict(momentum=0, log_every=0, weight_decay=0.0, eps=0.0, d0=1e-6, growth_rate=INF),
    "DADAPT_LION": dict(beta1=0.9, beta2=0.999, weight_decay=0.0, log_every=0, d0=1e-6, fsdp_in_use=False),
    "PRODIGY": dict(beta1=0.9, beta2=0.999, beta3=None, eps=1e-8, weight_decay=0, decouple=True, use_bias_correction=False,
                    safeguard_warmup=False, d0=1e-6, d_coef=1.0, growth_rate=INF, fsdp_in_use=False, slice_p=1),
    "PRODIGY_PLUS_SCHEDULE_FREE": dict(
        beta1=0.9, beta2=0.99, beta3=None, weight_decay=0.0, weight_decay_by_lr=True, use_bias_correction=False, d0=1e-6, d_coef=1.0,
        prodigy_steps=0, use_speed=False, eps=None, split_groups=True, split_groups_mean=True, factored=True, factored_fp32=True,
        fused_back_pass=False, use_stableadamw=True, use_cautious=False, use_grams=False, use_adopt=False, stochastic_rounding=True,
        d_limiter=True, use_schedulefree=True, schedulefree_c=0.0, use_orthograd=False),
    "ADAFACTOR": dict(eps=1e-30, eps2=1e-3, clip_threshold=1.0, decay_rate=-0.8, beta1=None, weight_decay=0.0, scale_parameter=True,
                      relative_step=True, warmup_init=False, stochastic_rounding=False),
    "CAME": {**CAME, "use_cautious": False},
    "CAME_8BIT": {**CAME, "min_8bit_size": 16384, "quant_block_size": 2048},
    "ADAMW_ADV": {**ADV, "beta1": 0, "beta2": 0.99, "eps": 1e-8, "use_atan2": False, "use_AdEMAMix": False, "beta3_ema": 0.9999,
                  "alpha": 5, "kourkoutas_beta": False},
    "ADOPT_ADV": {**ADV, **SIMPLIFIED, "beta1": 0, "beta2": 0.9999, "eps": 1e-6, "use_atan2": False, "use_AdEMAMix": False,
                  "beta3_ema": 0.9999, "alpha": 5, "kourkoutas_beta": False},
    "PRODIGY_ADV": {**ADV, **SIMPLIFIED, "beta1": 0, "beta2": 0.99, "beta3": None, "eps": 1e-8, "d0": 1e-6, "d_coef": 1.0,
                    "growth_rate": INF, "slice_p": 1, "prodigy_steps": 0, "d_limiter": False, "use_atan2": False, "use_AdEMAMix": False,
                    "beta3_ema": 0.9999, "alpha": 5, "kourkoutas_beta": False},
    "SIGNSGD_ADV": {**ADV, **SIMPLIFIED, "momentum": 0},
    "LION_ADV": {**ADV, "beta1": 0.9, "beta2": 0.99, "clip_threshold": 0.0, "auto_kappa_p": False},
    "MUON_ADV": {**ADV, **SIMPLIFIED, **MUON_ADV, "beta1": 0.9, "beta2_normuon": 0.95},
    "ADAMUON_ADV": {**ADV, **SIMPLIFIED, **MUON_ADV, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "use_atan2": False},
    "MUON": dict(momentum=0.95, weight_decay=0.0),
    "ADABELIEF": dict(weight_decay=0, beta1=0.9, beta2=0.999, eps=1e-16, amsgrad=False, decoupled_decay=True, fixed_decay=False,
                      rectify=True, degenerated_to_sgd=True),
    "TIGER": dict(weight_decay=0, beta1=0.9, decoupled_decay=True, fixed_decay=False),
    "AIDA": dict(weight_decay=0.0, beta1=0.9, beta2=0.999, decoupled_decay=True, fixed_decay=False, k=2, xi=1e-20, rectify=False,
                 n_sma_threshold=5, degenerated_to_sgd=True, ams_bound=False, r=0.95, adanorm=False, adam_debias=False, eps=1e-8),
    "ADOPT": dict(beta1=0.9, beta2=0.9999, weight_decay=0.0, decoupled_decay=False, fixed_decay=False, cautious=False, eps=1e-6),
    "YOGI": dict(beta1=0.9, beta2=0.999, weight_decay=0.0, decoupled_decay=True, fixed_decay=False, r=0.95, adanorm=False,
                 adam_debias=False, initial_accumulator=1e-6, eps=1e-3),
}
# Where we knowingly differ: fallbacks the library refuses (OneTrainer fails to build the optimizer),
# which keep our working defaults, and a None we cannot express (the import warns).
OURS = {("SGD_8BIT", "momentum"): 0.9, ("LARS", "momentum"): 0.9, ("LARS_8BIT", "momentum"): 0.9,
        ("SCHEDULE_FREE_SGD", "momentum"): 0.9, ("DADAPT_ADA_GRAD", "eps"): 1e-6, ("PRODIGY_PLUS_SCHEDULE_FREE", "eps"): 1e-8}
# TrainOptimizerConfig's keys (modules/util/config/TrainConfig.py): the ones OneTrainer writes; ours are the same.
ALL_NULL = dict.fromkeys(k for k in OptimizerConfig.model_fields if k != "optimizer")


def test_every_optimizer_has_a_row() -> None:
    assert set(CREATE_PY) == {o.value for o in O} == {o.value for o in OPTIMIZERS}  # none is unavailable here


def _value(optimizer: torch.optim.Optimizer, kwargs: dict, settings: dict, name: O, key: str) -> object:
    """What the built optimizer holds for a config key: its first group's argument (a betas/eps
    tuple's element), else the constructor argument passed, else our setting (the non-constructor ones)."""
    entry, group = OPTIMIZERS[name], optimizer.param_groups[0]
    if key in NOT_CONSTRUCTOR_ARGS:
        return settings[key]
    for arg, keys in entry.tuples.items():
        if key in keys:
            held = group.get(arg, kwargs.get(arg))
            return None if held is None else held[keys.index(key)]
    arg = entry.keys[key]
    if arg in group:
        return group[arg]
    return kwargs.get(arg)


@pytest.mark.parametrize("name", list(O), ids=lambda o: o.value)
def test_all_null_optimizer_section_trains_with_create_py_fallbacks(name: O) -> None:
    result = load_config({"__version": 11, "optimizer": {**ALL_NULL, "optimizer": name.value}})
    config = result.config.optimizer
    # two groups, as the trainer passes them (Prodigy Plus splits only then); matrices only, as Muon
    # without its AdamW (MuonWithAuxAdam null) takes no 1-D weights
    groups = [{"params": [torch.nn.Parameter(torch.randn(4, 4))], "lr": 1e-3, "name": part} for part in ("unet", "text_encoder")]
    optimizer = create_optimizer(groups, config, torch.device("cpu"))
    kwargs, settings = resolve_settings(config), effective_settings(config)
    wrong = {}
    for key, ot in CREATE_PY[name.value].items():
        if key in LIBRARY_LACKS.get(name, {}) or key in SPEED_ONLY:  # the fast kernels stay ours: the same step
            continue
        expected = OURS.get((name.value, key), ot)
        got = _value(optimizer, kwargs, settings, name, key)
        if not (got == expected or (isinstance(got, float) and isinstance(expected, float) and math.isclose(got, expected))):
            wrong[key] = (got, expected)
    assert not wrong, f"{name.value}: (ours, OneTrainer's): {wrong}"
    assert any("passes to" in w for w in result.warnings) == (name is O.PRODIGY_PLUS_SCHEDULE_FREE)  # its eps: None


def test_left_out_settings_are_onetrainers_in_a_file_it_wrote() -> None:
    """A setting left out of a file OneTrainer wrote (an older version's) is TrainOptimizerConfig's
    default, None there meaning create.py's fallback; a config made by hand keeps our page's defaults."""
    written = load_config({"__version": 11, "optimizer": {"optimizer": "SCHEDULE_FREE_SGD"}}).config.optimizer
    assert (written.weight_decay, written.foreach, written.r) == (0, True, 0)  # foreach: ours (speed only)
    by_hand = load_config({"optimizer": {"optimizer": "SCHEDULE_FREE_SGD"}}).config.optimizer
    assert (by_hand.weight_decay, by_hand.foreach) == (None, True)  # blank: our defaults table (0.01)
    assert effective_settings(by_hand)["weight_decay"] == 0.01


def test_a_null_muon_adam_rate_is_the_runs_learning_rate() -> None:
    """OneTrainer's muon_util.py: the AdamW part of Muon trains at the run's learning rate when muon_adam_lr is null."""
    imported = load_config({"__version": 11, "learning_rate": 2e-4, "optimizer": {**ALL_NULL, "optimizer": "MUON"}}).config
    assert imported.optimizer.muon_adam_lr == 2e-4
    by_hand = load_config({"learning_rate": 2e-4, "optimizer": {"optimizer": "MUON"}}).config
    assert by_hand.optimizer.muon_adam_lr is None and effective_settings(by_hand.optimizer)["muon_adam_lr"] == 3e-4
