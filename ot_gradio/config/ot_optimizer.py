"""What OneTrainer trains with where its config leaves an optimizer setting null or out.

OneTrainer reads a null as None (a true/false setting too) and its modules/util/create.py then
passes `value if value is not None else <fallback>`, with fallbacks of its own that are not
always those of its optimizer defaults (OPTIMIZER_DEFAULT_PARAMETERS, our optimizer_defaults.json):
AdamW's weight decay 1e-2, Adafactor's relative step on, adv-optm's beta1 0. A config made on
our page leaves a setting blank for our defaults table; an imported OneTrainer config gets the
fallback written in, so it trains as in OneTrainer and the page shows the values used.
"""

from __future__ import annotations

from typing import Any

from .optimizer import OptimizerConfig, optimizer_param_defaults

INF = float("inf")

# create.py's fallback for each setting it reads, per optimizer, in our keys (transcribed from
# OneTrainer's modules/util/create.py, create_optimizer). None: create.py passes None, so the
# library's own default. A switch that create.py passes on as it is (stochastic rounding of adv-optm
# and CAME, and the ones it only tests for truth) is off when null. Left out: the fallbacks their
# libraries refuse, on which OneTrainer fails (momentum 0 for SGD_8BIT, LARS, LARS_8BIT and
# SCHEDULE_FREE_SGD, eps 0 for DADAPT_ADA_GRAD): our working defaults stay (optimizer.WORKING_DEFAULTS).
_ADAM = {"beta1": 0.9, "beta2": 0.999, "weight_decay": 0, "eps": 1e-8, "amsgrad": False, "foreach": False, "maximize": False,
         "capturable": False, "differentiable": False, "fused": False, "stochastic_rounding": False, "fused_back_pass": False}
_BNB_ADAM = {"beta1": 0.9, "beta2": 0.999, "weight_decay": 0, "eps": 1e-8, "min_8bit_size": 4096, "percentile_clipping": 100,
             "block_wise": True, "is_paged": False}
_ADEMAMIX = {"beta1": 0.9, "beta2": 0.999, "beta3": 0.9999, "weight_decay": 1e-2, "eps": 1e-8, "alpha": 5, "min_8bit_size": 4096,
             "is_paged": False}
_ADAGRAD = {"weight_decay": 0, "eps": 1e-10, "lr_decay": 0, "initial_accumulator_value": 0}
_RMSPROP = {"weight_decay": 0, "eps": 1e-8, "alpha": 0.99, "momentum": 0, "centered": False}
_BNB_8BIT = {"min_8bit_size": 4096, "percentile_clipping": 100, "block_wise": True}
_LARS = {"weight_decay": 0, "dampening": 0, "nesterov": False, "max_unorm": 0.02}
_LAMB = {"bias_correction": True, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0, "amsgrad": False, "adam_w_mode": True,
         "min_8bit_size": 4096, "percentile_clipping": 100, "block_wise": False, "max_unorm": 1.0}
_DADAPT = {"log_every": 0, "d0": 1e-6}
_CAME = {"eps": 1e-30, "eps2": 1e-16, "beta1": 0.9, "beta2": 0.999, "beta3": 0.9999, "weight_decay": 0, "stochastic_rounding": False}
_ADV = {"weight_decay": 0.0, "nnmf_factor": False, "cautious_wd": False, "stochastic_rounding": False, "orthogonal_gradient": False,
        "compile": False}
_ADV_ADAM = {**_ADV, "beta1": 0, "eps": 1e-8, "use_atan2": False, "use_AdEMAMix": False, "beta3_ema": 0.9999, "alpha": 5,
             "kourkoutas_beta": False}
_SIMPLIFIED = {"Simplified_AdEMAMix": False, "alpha_grad": 100}
_MUON_ADV = {**_ADV, **_SIMPLIFIED, "ns_steps": 5, "rms_rescaling": True, "nesterov": True, "low_rank_ortho": False, "ortho_rank": 128,
             "normuon_variant": False, "accelerated_ns": False, "approx_mars": False}
_DECAY = {"decoupled_decay": True, "fixed_decay": False}

NULL_READS_AS: dict[str, dict[str, Any]] = {
    "SGD": {"momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": False, "foreach": False, "maximize": False,
            "differentiable": False},
    "SGD_8BIT": {"dampening": 0, "weight_decay": 0, "nesterov": False},
    "ADAM": _ADAM,
    "ADAMW": {**_ADAM, "weight_decay": 1e-2},
    "ADAM_8BIT": _BNB_ADAM,
    "ADAMW_8BIT": {**_BNB_ADAM, "weight_decay": 1e-2},
    "AdEMAMix": {**_ADEMAMIX, "optim_bits": 32},
    "AdEMAMix_8BIT": _ADEMAMIX,
    "ADAGRAD": _ADAGRAD,
    "ADAGRAD_8BIT": {**_ADAGRAD, **_BNB_8BIT},
    "RMSPROP": _RMSPROP,
    "RMSPROP_8BIT": {**_RMSPROP, **_BNB_8BIT},
    "LION": {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0, "use_triton": False},
    "LION_8BIT": {"beta1": 0.9, "beta2": 0.999, "weight_decay": 0, "is_paged": False, **_BNB_8BIT},
    "LARS": _LARS,
    "LARS_8BIT": {**_LARS, "min_8bit_size": 4096, "percentile_clipping": 100},
    "LAMB": {**_LAMB, "optim_bits": 32},
    "LAMB_8BIT": _LAMB,
    "SCHEDULE_FREE_ADAMW": {"beta1": 0.9, "beta2": 0.999, "weight_decay": 1e-2, "eps": 1e-8, "r": 0, "weight_lr_power": 2.0,
                            "foreach": False},
    "SCHEDULE_FREE_SGD": {"weight_decay": 0, "r": 0, "weight_lr_power": 2.0, "foreach": False},
    "DADAPT_SGD": {**_DADAPT, "momentum": 0.0, "weight_decay": 0, "growth_rate": INF, "fsdp_in_use": False},
    "DADAPT_ADAM": {**_DADAPT, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0, "decouple": False,
                    "use_bias_correction": False, "growth_rate": INF, "fsdp_in_use": False},
    "DADAPT_ADAN": {**_DADAPT, "beta1": 0.98, "beta2": 0.92, "beta3": 0.99, "eps": 1e-8, "weight_decay": 0.02, "no_prox": False,
                    "growth_rate": INF},
    "DADAPT_ADA_GRAD": {**_DADAPT, "momentum": 0, "weight_decay": 0.0, "growth_rate": INF},
    "DADAPT_LION": {**_DADAPT, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0, "fsdp_in_use": False},
    "PRODIGY": {"beta1": 0.9, "beta2": 0.999, "beta3": None, "eps": 1e-8, "weight_decay": 0, "decouple": True,
                "use_bias_correction": False, "safeguard_warmup": False, "d0": 1e-6, "d_coef": 1.0, "growth_rate": INF,
                "fsdp_in_use": False, "slice_p": 1},
    "PRODIGY_PLUS_SCHEDULE_FREE": {
        "beta1": 0.9, "beta2": 0.99, "beta3": None, "weight_decay": 0.0, "weight_decay_by_lr": True, "use_bias_correction": False,
        "d0": 1e-6, "d_coef": 1.0, "prodigy_steps": 0, "use_speed": False, "eps": None, "split_groups": True, "split_groups_mean": True,
        "factored": True, "factored_fp32": True, "fused_back_pass": False, "use_stableadamw": True, "use_cautious": False,
        "use_grams": False, "use_adopt": False, "stochastic_rounding": True, "d_limiter": True, "use_schedulefree": True,
        "schedulefree_c": 0.0, "use_orthograd": False},
    "ADAFACTOR": {"eps": 1e-30, "eps2": 1e-3, "clip_threshold": 1.0, "decay_rate": -0.8, "beta1": None, "weight_decay": 0.0,
                  "scale_parameter": True, "relative_step": True, "warmup_init": False, "stochastic_rounding": False},
    "CAME": {**_CAME, "use_cautious": False},
    "CAME_8BIT": {**_CAME, "min_8bit_size": 16384, "quant_block_size": 2048},
    "ADAMW_ADV": {**_ADV_ADAM, "beta2": 0.99},
    "ADOPT_ADV": {**_ADV_ADAM, **_SIMPLIFIED, "beta2": 0.9999, "eps": 1e-6},
    "PRODIGY_ADV": {**_ADV_ADAM, **_SIMPLIFIED, "beta2": 0.99, "beta3": None, "d0": 1e-6, "d_coef": 1.0, "growth_rate": INF,
                    "slice_p": 1, "prodigy_steps": 0, "d_limiter": False},
    "SIGNSGD_ADV": {**_ADV, **_SIMPLIFIED, "momentum": 0},
    "LION_ADV": {**_ADV, "beta1": 0.9, "beta2": 0.99, "clip_threshold": 0.0, "auto_kappa_p": False},
    "MUON": {"momentum": 0.95, "weight_decay": 0.0},
    "MUON_ADV": {**_MUON_ADV, "beta1": 0.9, "beta2_normuon": 0.95},
    "ADAMUON_ADV": {**_MUON_ADV, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "use_atan2": False},
    "ADABELIEF": {**_DECAY, "weight_decay": 0, "beta1": 0.9, "beta2": 0.999, "eps": 1e-16, "amsgrad": False, "rectify": True,
                  "degenerated_to_sgd": True},
    "TIGER": {**_DECAY, "weight_decay": 0, "beta1": 0.9},
    "AIDA": {**_DECAY, "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.999, "k": 2, "xi": 1e-20, "rectify": False, "n_sma_threshold": 5,
             "degenerated_to_sgd": True, "ams_bound": False, "r": 0.95, "adanorm": False, "adam_debias": False, "eps": 1e-8},
    "ADOPT": {"beta1": 0.9, "beta2": 0.9999, "weight_decay": 0.0, "decoupled_decay": False, "fixed_decay": False, "cautious": False,
              "eps": 1e-6},
    "YOGI": {**_DECAY, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0, "r": 0.95, "adanorm": False, "adam_debias": False,
             "initial_accumulator": 1e-6, "eps": 1e-3},
}

# torch's fused / foreach kernels: the same step, faster. create.py's fallback (off) is not taken:
# a null keeps our page's (optimizer.WORKING_DEFAULTS), as a run imported from OneTrainer should
# not be slower for what it learns identically.
SPEED_ONLY = frozenset({"fused", "foreach"})


def read_onetrainer_optimizer(section: dict[str, Any], fill_missing: bool, learning_rate: Any = None) -> list[str]:
    """Write into a OneTrainer optimizer section (our keys, before validation) what OneTrainer trains
    with for its null settings and, with `fill_missing` (a file OneTrainer wrote), those left out.
    Muon's AdamW rate (`muon_adam_lr`) null is the run's `learning_rate` there (muon_util.py).
    Returns a warning for a null that OneTrainer leaves to the library and we cannot leave unset."""
    name = section.get("optimizer", OptimizerConfig.model_fields["optimizer"].default.value)
    fallbacks = NULL_READS_AS.get(name) if isinstance(name, str) else None
    if fallbacks is None:  # a wrong name: validation names it
        return []
    if "MUON" in name and section.get("muon_adam_lr", None if fill_missing else 0) is None and isinstance(learning_rate, int | float):
        section["muon_adam_lr"] = float(learning_rate)
    unset = []
    for key, fallback in fallbacks.items():
        if key in SPEED_ONLY:
            continue
        if key not in section:
            if not fill_missing:
                continue
            default = OptimizerConfig.model_fields[key].default
            section[key] = fallback if default is None else default
        elif section[key] is None:
            section[key] = fallback
        ours = optimizer_param_defaults(name).get(key)
        if section[key] is None and ours is not None:
            unset.append(f"optimizer.{key} -> {ours}")
    if not unset:
        return []
    return [f"{'; '.join(unset)}: null, which OneTrainer passes to {name} as None (the library's own behaviour: for "
            "PRODIGY_PLUS_SCHEDULE_FREE's eps, Adam-atan2); this trainer cannot leave it unset and uses the value shown."]
