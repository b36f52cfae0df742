"""Every optimizer, one `register` line each: OneTrainer's name -> the class, and the config keys
it takes (OneTrainer's key -> the constructor's argument).

The libraries are OneTrainer's: torch, bitsandbytes (the 8-bit ones, LAMB, LARS, AdEMAMix),
lion-pytorch, dadaptation, prodigyopt, transformers (Adafactor), adv-optm (the *_ADV ones) and
prodigy-plus-schedule-free; CAME, the schedule-free optimizers, ADOPT, TIGER, AIDA and YOGI come from
pytorch-optimizer, as does ADABELIEF (OneTrainer takes it from timm, which needs torchvision).
Libraries are imported when the optimizer is built, so importing the registry stays cheap.
The Muon ones are in muon.py (MUON: pytorch-optimizer's Muon in place of Keller Jordan's, on no
package index). CAME_8BIT (OneTrainer's own code, on no package index) is ours: came8bit.py.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from ...config.enums import Optimizer as O
from .came8bit import CAME8bit
from .muon import adv_muon, muon
from .registry import register


def lazy(module: str, name: str) -> Callable[..., torch.optim.Optimizer]:
    def build(params: Any, **kwargs: Any) -> torch.optim.Optimizer:
        return getattr(importlib.import_module(module), name)(params, **kwargs)

    build.__qualname__ = build.__name__ = f"{module}.{name}"
    return build


def bnb(name: str) -> Callable[..., torch.optim.Optimizer]:
    return lazy("bitsandbytes.optim", name)


def by_bits(torch_class: type[torch.optim.Optimizer], bnb_name: str) -> Callable[..., torch.optim.Optimizer]:
    """32 optimizer bits: torch's class (it also has centered RMSprop, Adagrad's LR decay and initial
    accumulator); 8 bits: bitsandbytes' class with an 8-bit state, as OneTrainer builds it."""

    def build(params: Any, optim_bits: int = 32, min_8bit_size: int = 4096, **kwargs: Any) -> torch.optim.Optimizer:
        if optim_bits == 8:
            return bnb(bnb_name)(params, optim_bits=8, min_8bit_size=min_8bit_size, **kwargs)
        return torch_class(params, **kwargs)

    return build


def adafactor(params: Any, lr: float, relative_step: bool = True, **kwargs: Any) -> torch.optim.Optimizer:
    """Adaptive mode (relative step) computes its own learning rate: the configured one is ignored."""
    from transformers.optimization import Adafactor  # noqa: PLC0415

    return Adafactor(params, lr=None if relative_step else lr, relative_step=relative_step, **kwargs)


def prodigy_adv(params: Any, **kwargs: Any) -> torch.optim.Optimizer:
    """adv-optm's Prodigy_adv, resumable: its running step-size numerator lives outside the state dict
    and, once loaded, the first step would take it undecayed (a resumed run drifted from an unbroken
    one by 3e-6 in two steps). After loading, it is set as the step before the stop would have left it."""
    from adv_optm import Prodigy_adv  # noqa: PLC0415

    optimizer = Prodigy_adv(params, **kwargs)
    load = optimizer.load_state_dict

    def load_state_dict(state_dict: dict[str, Any]) -> None:
        load(state_dict)
        optimizer.d_denom = torch.tensor(0.0, device=optimizer.param_groups[0]["params"][0].device)
        optimizer.init_step()  # with d_denom present: numerator = saved numerator * beta3

    optimizer.load_state_dict = load_state_dict
    return optimizer


BETAS = {"betas": ("beta1", "beta2")}
BETAS3 = {"betas": ("beta1", "beta2", "beta3")}
TORCH_ADAM = ["eps", "weight_decay", "amsgrad", "foreach", "fused", "maximize", "capturable", "differentiable"]
BNB_ADAM = ["eps", "weight_decay", "amsgrad", "optim_bits", "min_8bit_size", "is_paged"]
LAMB = ["bias_correction", "eps", "weight_decay", "amsgrad", "adam_w_mode", "min_8bit_size", "max_unorm"]
LARS = ["momentum", "dampening", "weight_decay", "nesterov", "min_8bit_size", "max_unorm"]
RMSPROP = ["alpha", "eps", "weight_decay", "momentum", "centered"]
ADAGRAD = ["lr_decay", "weight_decay", "initial_accumulator_value", "eps"]
ADEMAMIX = ["alpha", "eps", "weight_decay", "min_8bit_size", "is_paged"]
DADAPT = ["d0", "log_every"]

register(O.ADAGRAD, by_bits(torch.optim.Adagrad, "Adagrad"), [*ADAGRAD, "optim_bits", "min_8bit_size"])
register(O.ADAGRAD_8BIT, bnb("Adagrad8bit"), [*ADAGRAD, "optim_bits", "min_8bit_size"])
register(O.ADAM, torch.optim.Adam, TORCH_ADAM, BETAS)
register(O.ADAM_8BIT, bnb("Adam8bit"), BNB_ADAM, BETAS)
register(O.ADAMW, torch.optim.AdamW, TORCH_ADAM, BETAS)
register(O.ADAMW_8BIT, bnb("AdamW8bit"), BNB_ADAM, BETAS)
register(O.LAMB, bnb("LAMB"), [*LAMB, "optim_bits"], BETAS)
register(O.LAMB_8BIT, bnb("LAMB8bit"), LAMB, BETAS)
register(O.LARS, bnb("LARS"), [*LARS, "optim_bits"])
register(O.LARS_8BIT, bnb("LARS8bit"), LARS)
register(O.LION, lazy("lion_pytorch", "Lion"), ["weight_decay", "use_triton"], BETAS)
register(O.LION_8BIT, bnb("Lion8bit"), ["weight_decay", "min_8bit_size", "is_paged"], BETAS)
register(O.RMSPROP, by_bits(torch.optim.RMSprop, "RMSprop"), [*RMSPROP, "optim_bits", "min_8bit_size"])
register(O.RMSPROP_8BIT, bnb("RMSprop8bit"), [*RMSPROP, "min_8bit_size"])
register(O.SGD, torch.optim.SGD, ["momentum", "dampening", "weight_decay", "nesterov", "foreach", "maximize", "differentiable"])
register(O.SGD_8BIT, bnb("SGD8bit"), ["momentum", "dampening", "weight_decay", "nesterov", "min_8bit_size"])
register(O.DADAPT_ADA_GRAD, lazy("dadaptation", "DAdaptAdaGrad"), [*DADAPT, "momentum", "weight_decay", "eps", "growth_rate"])
register(O.DADAPT_ADAM, lazy("dadaptation", "DAdaptAdam"),
         [*DADAPT, "eps", "weight_decay", "decouple", "use_bias_correction", "growth_rate", "fsdp_in_use"], BETAS)
register(O.DADAPT_ADAN, lazy("dadaptation", "DAdaptAdan"), [*DADAPT, "eps", "weight_decay", "no_prox", "growth_rate"], BETAS3)
register(O.DADAPT_LION, lazy("dadaptation", "DAdaptLion"), [*DADAPT, "weight_decay", "fsdp_in_use"], BETAS)
register(O.DADAPT_SGD, lazy("dadaptation", "DAdaptSGD"), [*DADAPT, "momentum", "weight_decay", "growth_rate", "fsdp_in_use"])
register(O.PRODIGY, lazy("prodigyopt", "Prodigy"),
         ["beta3", "eps", "weight_decay", "decouple", "use_bias_correction", "safeguard_warmup", "d0", "d_coef", "growth_rate",
          "fsdp_in_use", "slice_p"], BETAS)
register(O.ADAFACTOR, adafactor,
         ["clip_threshold", "decay_rate", "beta1", "weight_decay", "scale_parameter", "relative_step", "warmup_init"],
         {"eps": ("eps", "eps2")})
register(O.CAME, lazy("pytorch_optimizer", "CAME"), {"weight_decay": "weight_decay", "eps": "eps1", "eps2": "eps2"}, BETAS3)
register(O.CAME_8BIT, CAME8bit, ["weight_decay", "min_8bit_size", "quant_block_size"], {**BETAS3, "eps": ("eps", "eps2")})
register(O.SCHEDULE_FREE_ADAMW, lazy("pytorch_optimizer", "ScheduleFreeAdamW"),
         ["eps", "weight_decay", "r", "weight_lr_power", "foreach"], BETAS)
register(O.SCHEDULE_FREE_SGD, lazy("pytorch_optimizer", "ScheduleFreeSGD"), ["momentum", "weight_decay", "r", "weight_lr_power", "foreach"])
register(O.ADEMAMIX, bnb("AdEMAMix"), [*ADEMAMIX, "optim_bits"], BETAS3)
register(O.ADEMAMIX_8BIT, bnb("AdEMAMix8bit"), ADEMAMIX, BETAS3)

# adv-optm: the settings every one of them shares; "compile" is its `compiled_optimizer`.
ADV = {"weight_decay": "weight_decay", "cautious_wd": "cautious_wd", "nnmf_factor": "nnmf_factor",
       "orthogonal_gradient": "orthogonal_gradient", "stochastic_rounding": "stochastic_rounding", "compile": "compiled_optimizer"}
ADV_ADAM = {**ADV, **{k: k for k in ("eps", "use_atan2", "use_AdEMAMix", "beta3_ema", "alpha", "kourkoutas_beta")}}
ADV_SIMPLIFIED = {"Simplified_AdEMAMix": "Simplified_AdEMAMix", "alpha_grad": "alpha_grad"}
# pytorch-optimizer calls decoupled decay `weight_decouple`
DECAY = {"weight_decay": "weight_decay", "decoupled_decay": "weight_decouple", "fixed_decay": "fixed_decay"}

register(O.ADAMW_ADV, lazy("adv_optm", "AdamW_adv"), ADV_ADAM, BETAS)
register(O.ADOPT_ADV, lazy("adv_optm", "Adopt_adv"), {**ADV_ADAM, **ADV_SIMPLIFIED}, BETAS)
register(O.LION_ADV, lazy("adv_optm", "Lion_adv"), {**ADV, "clip_threshold": "clip_threshold", "auto_kappa_p": "auto_kappa_p"}, BETAS)
register(O.SIGNSGD_ADV, lazy("adv_optm", "SignSGD_adv"), {**ADV, **ADV_SIMPLIFIED, "momentum": "momentum"})
register(O.PRODIGY_ADV, prodigy_adv,
         {**ADV_ADAM, **ADV_SIMPLIFIED, **{k: k for k in ("beta3", "d0", "d_coef", "d_limiter", "growth_rate", "prodigy_steps",
                                                          "slice_p")}}, BETAS)
register(O.PRODIGY_PLUS_SCHEDULE_FREE, lazy("prodigyplus.prodigy_plus_schedulefree", "ProdigyPlusScheduleFree"),
         ["beta3", "d0", "d_coef", "d_limiter", "eps", "factored", "factored_fp32", "fused_back_pass", "prodigy_steps", "schedulefree_c",
          "split_groups", "split_groups_mean", "stochastic_rounding", "use_adopt", "use_bias_correction", "use_cautious", "use_grams",
          "use_orthograd", "use_schedulefree", "use_speed", "use_stableadamw", "weight_decay", "weight_decay_by_lr"], BETAS)
register(O.ADOPT, lazy("pytorch_optimizer", "ADOPT"), {**DECAY, "eps": "eps", "cautious": "cautious"}, BETAS)
register(O.ADABELIEF, lazy("pytorch_optimizer", "AdaBelief"), {**DECAY, **{k: k for k in ("eps", "rectify", "degenerated_to_sgd")}}, BETAS)
register(O.TIGER, lazy("pytorch_optimizer", "Tiger"), {**DECAY, "beta1": "beta"})
register(O.AIDA, lazy("pytorch_optimizer", "Aida"),
         {**DECAY, "r": "adanorm_r", **{k: k for k in ("eps", "k", "xi", "rectify", "n_sma_threshold", "degenerated_to_sgd", "ams_bound",
                                                       "adanorm", "adam_debias")}}, BETAS)
register(O.YOGI, lazy("pytorch_optimizer", "Yogi"), {**DECAY, "eps": "eps", "initial_accumulator": "initial_accumulator",
                                                    "adam_debias": "adam_debias"}, BETAS)

MUON_ADV_KEYS = {**ADV, **ADV_SIMPLIFIED, "muon_adam_config": "muon_adam_config",
                 **{k: k for k in ("ns_steps", "rms_rescaling", "nesterov", "normuon_variant", "low_rank_ortho", "ortho_rank",
                                   "accelerated_ns", "approx_mars")}}
register(O.MUON, muon, ["momentum", "weight_decay", "muon_adam_config"])
register(O.MUON_ADV, adv_muon("Muon_adv"), {**MUON_ADV_KEYS, "beta1": "beta1", "beta2_normuon": "beta2_normuon"})
register(O.ADAMUON_ADV, adv_muon("AdaMuon_adv"), {**MUON_ADV_KEYS, "eps": "eps", "use_atan2": "use_atan2"}, BETAS)
