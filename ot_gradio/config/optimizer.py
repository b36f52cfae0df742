"""The optimizer and every parameter OneTrainer knows for it (its TrainOptimizerConfig).

Blank (None) means "the optimizer's own default". The defaults of each optimizer are listed in
``optimizer_defaults.json`` (OneTrainer's), which the page offers as "Load defaults". A OneTrainer
config's null settings are read as its create.py reads them, on import (ot_optimizer.py).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from .enums import Optimizer
from .enums import Optimizer as O
from .fields import PLANNED, Section, opt

P = PLANNED



class OptimizerConfig(Section):
    """The optimizer and its parameters. Blank (None) means the optimizer's own default."""

    optimizer: Optimizer = opt(Optimizer.ADAMW, "Optimizer", "The optimizer. ADAMW is one of the most used and a safe default. PRODIGY finds its own learning rate: set every learning rate to 1 and use the COSINE or CONSTANT scheduler. ADAFACTOR works as a low-memory AdamW or, with the ADAFACTOR scheduler, as an adaptive optimizer. The 8-bit variants save VRAM at some cost in quality. The _ADV ones (adv-optm) are AdamW, ADOPT, Lion, SignSGD and Prodigy with memory savers (NNMF factor) and extras, and support the fused back pass. PRODIGY_PLUS_SCHEDULE_FREE finds its own learning rate and needs no schedule (CONSTANT). ADOPT, ADABELIEF, AIDA and YOGI are Adam variants (more stable second moment); TIGER is a low-memory sign-based optimizer like Lion. MUON, MUON_ADV and ADAMUON_ADV orthogonalise the updates of the hidden layers' weight matrices (and train the rest with an AdamW inside): their learning rates are higher than AdamW's (0.02 is usual for MUON).")
    adam_w_mode: bool = opt(False, "AdamW mode", "Whether to use AdamW-style (decoupled) weight decay in Adam-family optimizers such as LAMB.", advanced=True)
    alpha: float | None = opt(None, "Alpha", "RMSprop: smoothing constant of the squared-gradient average (0.99). AdEMAMix: weight of the slow moving average (5).", ge=0)
    amsgrad: bool = opt(False, "AMSGrad", "Use the AMSGrad variant of Adam, which keeps the largest second moment seen so far.")
    beta1: float | None = opt(None, "Beta1", "Momentum: decay of the running average of gradients (0.9 for Adam). Adafactor: leave blank unless you know you need it; a value turns on an extra average and costs a lot of VRAM.", ge=0, lt=1)
    beta2: float | None = opt(None, "Beta2", "Decay of the running average of squared gradients (0.999 for Adam). Prodigy: 0.99 to 0.999 is recommended; 0.99 has been seen to help it converge.", ge=0, lt=1)
    beta3: float | None = opt(None, "Beta3", "Prodigy: coefficient for computing its step size. Blank = sqrt(beta2).", ge=0, lt=1)
    bias_correction: bool = opt(False, "Bias correction", "Use Adam's bias correction in optimizers that offer it.")
    block_wise: bool = opt(False, "Block-wise", "8-bit optimizers: quantize the optimizer state block by block (more precise). bitsandbytes 0.50 always works block-wise and has no switch for it.", status=P, advanced=True)
    capturable: bool = opt(False, "Capturable", "Allow the optimizer step to be captured in a CUDA graph.", advanced=True)
    centered: bool = opt(False, "Centered", "RMSprop: normalise by the estimated variance of the gradient; can stabilise training.")
    clip_threshold: float | None = opt(None, "Clip threshold", "Adafactor: clip the update so its root mean square stays below this (default 1.0). LION_ADV: clip the gradient's size per weight first (blank or 0 = off).", ge=0)
    d0: float | None = opt(None, "Initial D", "D-Adaptation / Prodigy: the first estimate of the step size (default 1e-6).", ge=0)
    d_coef: float | None = opt(None, "D coefficient", "D-Adaptation / Prodigy: multiplies the estimated step size, so it acts as a learning-rate multiplier: 0.5 slows Prodigy down, 2 speeds it up.", ge=0)
    dampening: float | None = opt(None, "Dampening", "SGD: dampening for momentum.", ge=0)
    decay_rate: float | None = opt(None, "Decay rate", "Adafactor: how fast the second-moment estimate decays (default -0.8).")
    decouple: bool = opt(False, "Decouple", "Use AdamW-style decoupled weight decay (Prodigy, D-Adaptation).")
    differentiable: bool = opt(False, "Differentiable", "Allow autograd through the optimizer step (for research only; slower).", advanced=True)
    eps: float | None = opt(None, "EPS", "A small value that prevents division by zero (1e-8 for Adam, 1e-30 for Adafactor).", ge=0)
    eps2: float | None = opt(None, "EPS 2", "Adafactor: the second small value that prevents division by zero (default 1e-3).", ge=0)
    foreach: bool | None = opt(True, "Foreach", "Use torch's multi-tensor (foreach) step where torch has one for the device (CUDA) and the fused step is not used: faster, same results, but it holds temporary copies of the updates (more VRAM). Off = one weight at a time. The run's log says which step is used.")
    fsdp_in_use: bool = opt(False, "FSDP in use", "Prodigy / D-Adaptation: parameters are sharded (fully sharded data parallel).", advanced=True)
    fused: bool | None = opt(True, "Fused", "Use torch's fused step (Adam, AdamW) where torch has one for the device and dtype: faster, same results, less memory. Off = never. The run's log says which step is used.")
    fused_back_pass: bool = opt(False, "Fused back pass", "Step the optimizer for each weight as soon as its gradient is ready in the backward pass, so the gradients of the whole model are never held at once: saves a lot of VRAM with no loss in quality, except with gradient accumulation (as in OneTrainer); clip grad norm then clips each weight's gradient by its own norm, as in OneTrainer.")
    growth_rate: float | None = opt(None, "Growth rate", "Prodigy / D-Adaptation: the most the step size estimate may grow per step (default inf = no limit).", ge=0, allow_inf=True)
    initial_accumulator_value: float | None = opt(None, "Initial accumulator value", "Adagrad: starting value of the sum of squared gradients.", ge=0)
    initial_accumulator: float | None = opt(None, "Initial accumulator", "YOGI: starting value of its second-moment estimate (default 1e-6).", ge=0, advanced=True)
    is_paged: bool = opt(False, "Paged", "bitsandbytes optimizers: page the optimizer state to CPU memory when VRAM runs low.")
    log_every: int | None = opt(None, "Log every", "D-Adaptation: log the step size estimate every N steps (blank = never).", ge=0, advanced=True)
    lr_decay: float | None = opt(None, "LR decay", "Adagrad: rate at which the learning rate decreases.", ge=0)
    max_unorm: float | None = opt(None, "Max update norm", "8-bit optimizers: clip each update to this norm relative to the weights.", ge=0, advanced=True)
    maximize: bool = opt(False, "Maximize", "Maximise the objective instead of minimising it (for experiments only).")
    min_8bit_size: int | None = opt(None, "Min 8-bit size", "8-bit optimizers: tensors smaller than this keep a 32-bit state (default 4096; CAME_8BIT 16384, and it quantizes only weight matrices).", ge=0, advanced=True)
    quant_block_size: int | None = opt(None, "Quantization block size", "CAME_8BIT: values per block of its 8-bit first moment; each block keeps its own minimum and step, so smaller blocks are more precise and cost a little more (default 2048).", ge=1, advanced=True)
    momentum: float | None = opt(None, "Momentum", "SGD / RMSprop / SIGNSGD_ADV: momentum factor that accelerates steps in a consistent direction.", ge=0)
    nesterov: bool = opt(False, "Nesterov", "Use Nesterov momentum.")
    no_prox: bool = opt(False, "No prox", "DADAPT_ADAN: do not use the proximal update for weight decay.", advanced=True)
    optim_bits: int | None = opt(None, "Optimizer bits", "bitsandbytes optimizers (ADAGRAD, LAMB, LARS, RMSPROP, AdEMAMix): bits of the optimizer state, 32 or 8 (8 saves memory at some cost in quality).", ge=1, le=32, advanced=True)
    percentile_clipping: int | None = opt(None, "Percentile clipping", "bitsandbytes' optimizers (8-bit ones, LAMB, LARS, Adagrad, RMSprop): scale each weight's gradient down to this percentile of its last 100 gradient norms when above it (5: the 5th smallest); 100 = off. Done here, as bitsandbytes 0.50 dropped it.", ge=1, le=100, advanced=True)
    r: float | None = opt(None, "r", "Schedule-free optimizers: polynomial weighting power of the averaged iterate. AIDA: the power of its AdaNorm (0.95).", ge=0, advanced=True)
    relative_step: bool = opt(False, "Relative step", "Adafactor: compute its own time-dependent learning rate and ignore the learning rate set here. Use with the ADAFACTOR scheduler; it sets a learning rate too high for a fine-tune. Must be off to use Adafactor as a low-memory AdamW.")
    safeguard_warmup: bool = opt(False, "Safeguard warmup", "Prodigy / D-Adaptation: avoid problems during the warmup stage. Often better on for short runs.")
    scale_parameter: bool = opt(False, "Scale parameter", "Adafactor: scale the learning rate by the size of each weight. Must be off to use Adafactor as a low-memory AdamW.")
    stochastic_rounding: bool = opt(True, "Stochastic rounding", "Round weight updates stochastically; improves quality when the weights are kept in bfloat16 (the step is computed in float32, then rounded at random in proportion to the remainder, so small updates are not lost). No effect on float32 weights.")
    use_bias_correction: bool = opt(False, "Use bias correction", "Prodigy: turn on Adam's bias correction, so it acts more like Adam. Often recommended (unless with a constant scheduler); try both.")
    use_triton: bool = opt(False, "Use Triton", "LION: use its Triton kernel (needs a CUDA GPU and the triton package).", advanced=True)
    warmup_init: bool = opt(False, "Warmup initialization", "Adafactor: start from a small learning rate and warm it up (with relative step).")
    weight_decay: float | None = opt(None, "Weight decay", "Pulls weights towards zero to prevent overfitting. 0.01 is AdamW's usual value; for Prodigy 0.001 to 0.01 helps it not overtrain.", ge=0)
    weight_lr_power: float | None = opt(None, "Weight LR power", "Schedule-free optimizers: how strongly the learning rate weights the averaged iterate.", ge=0, advanced=True)
    decoupled_decay: bool = opt(False, "Decoupled decay", "ADABELIEF, ADOPT, TIGER, AIDA, YOGI: decay weights AdamW-style (apart from the gradient step) instead of adding the decay to the gradient.")
    fixed_decay: bool = opt(False, "Fixed decay", "ADABELIEF, ADOPT, TIGER, AIDA, YOGI: with decoupled decay, do not scale the decay by the learning rate.", advanced=True)
    rectify: bool = opt(False, "Rectify", "ADABELIEF, AIDA: use the RAdam rectification, which damps the adaptive steps while the variance estimate is still unreliable.", advanced=True)
    degenerated_to_sgd: bool = opt(False, "Degenerate to SGD", "ADABELIEF, AIDA (with rectify): take plain SGD steps while the variance estimate is unreliable, instead of no step.", advanced=True)
    k: int | None = opt(None, "Lookahead k", "AIDA: how many times it projects the gradient onto the moment when estimating the variance (default 2).", ge=1, advanced=True)
    xi: float | None = opt(None, "xi", "AIDA: small constant of its projections (default 1e-20).", ge=0, advanced=True)
    n_sma_threshold: int | None = opt(None, "SMA threshold", "AIDA (with rectify): steps of the rectification before the adaptive step is used (default 5).", ge=0, advanced=True)
    ams_bound: bool = opt(False, "AMS bound", "AIDA: keep the largest variance estimate seen so far (AMSBound).", advanced=True)
    adanorm: bool = opt(False, "AdaNorm", "AIDA: correct the gradient by its norm history (AdaNorm).", advanced=True)
    adam_debias: bool = opt(False, "Adam debias", "AIDA, YOGI: correct only the first moment's bias, as Adam does.", advanced=True)
    slice_p: int | None = opt(None, "Slice parameters", "Prodigy: estimate the step size from every p-th element to save memory (e.g. 11).", ge=1)
    cautious: bool = opt(False, "Cautious", "ADOPT: skip the parts of an update whose sign disagrees with the gradient (cautious optimizer).")
    weight_decay_by_lr: bool = opt(True, "Weight decay by LR", "PRODIGY_PLUS_SCHEDULE_FREE: scale weight decay by the learning rate.")
    prodigy_steps: int | None = opt(None, "Prodigy steps", "Prodigy: stop adapting the step size after this many steps (blank = never).", ge=0)
    use_speed: bool = opt(False, "Use SPEED", "Prodigy Plus: use the SPEED step-size estimate.", advanced=True)
    split_groups: bool = opt(True, "Split groups", "Prodigy Plus: estimate a separate step size for each parameter group (UNet, text encoder).", advanced=True)
    split_groups_mean: bool = opt(True, "Split groups mean", "Prodigy Plus: with split groups, use the mean of the group step sizes.", advanced=True)
    factored: bool = opt(True, "Factored", "Store the second moment in factored form (much less memory).", advanced=True)
    factored_fp32: bool = opt(True, "Factored in float32", "Keep the factored second moment in float32.", advanced=True)
    use_stableadamw: bool = opt(True, "StableAdamW", "Scale updates as StableAdamW does, so no gradient clipping is needed.", advanced=True)
    use_cautious: bool = opt(False, "Cautious updates", "PRODIGY_PLUS_SCHEDULE_FREE: skip the parts of an update whose sign disagrees with the gradient. Not in the CAME implementation used here (pytorch-optimizer).", advanced=True)
    use_grams: bool = opt(False, "Grams", "Use the sign of the gradient for the update direction (Grams).", advanced=True)
    use_adopt: bool = opt(False, "ADOPT", "Use the ADOPT update rule.", advanced=True)
    d_limiter: bool | None = opt(True, "D limiter", "PRODIGY_ADV, PRODIGY_PLUS_SCHEDULE_FREE: limit how fast the step size estimate can grow.", advanced=True)
    use_schedulefree: bool | None = opt(True, "Schedule-free", "Prodigy Plus: use schedule-free averaging (use with a constant scheduler).", advanced=True)
    use_orthograd: bool = opt(False, "OrthoGrad", "Remove the part of the gradient parallel to the weights.", advanced=True)
    nnmf_factor: bool = opt(False, "NNMF factor", "Factor the optimizer state with non-negative matrix factorisation to save memory.", advanced=True)
    orthogonal_gradient: bool = opt(False, "Orthogonal gradient", "Project the gradient orthogonal to the weights.", advanced=True)
    use_atan2: bool = opt(False, "atan2 update", "Use atan2 instead of division for the update (no EPS needed).", advanced=True)
    use_AdEMAMix: bool = opt(False, "AdEMAMix", "Mix in a slow moving average of gradients (AdEMAMix).", advanced=True)
    beta3_ema: float | None = opt(None, "Beta3 EMA", "AdEMAMix: decay of the slow moving average.", ge=0, lt=1, advanced=True)
    alpha_grad: float | None = opt(None, "Alpha grad", "_ADV optimizers with Simplified AdEMAMix: weight of the current gradient beside the average (default 100).", advanced=True)
    beta1_warmup: int | None = opt(None, "Beta1 warmup", "OneTrainer shows and saves this, but none of its optimizers is given it; nor is one here. Kept so that OneTrainer's configs load; not shown.", ge=0, compat=True, advanced=True)
    min_beta1: float | None = opt(None, "Min beta1", "OneTrainer shows and saves this, but none of its optimizers is given it; nor is one here. Kept so that OneTrainer's configs load; not shown.", ge=0, lt=1, compat=True, advanced=True)
    Simplified_AdEMAMix: bool = opt(False, "Simplified AdEMAMix", "Use the simplified AdEMAMix update.", advanced=True)
    kourkoutas_beta: bool = opt(False, "Kourkoutas beta", "_ADV optimizers: adapt beta2 per layer from the gradient's behaviour, after the learning-rate warmup (beta2 is held over its steps, as in OneTrainer).", advanced=True)
    schedulefree_c: float | None = opt(None, "Schedule-free C", "PRODIGY_PLUS_SCHEDULE_FREE: schedule-free averaging constant (0 = the original averaging).", advanced=True)
    ns_steps: int | None = opt(None, "Newton-Schulz steps", "MUON_ADV, ADAMUON_ADV: iterations of the Newton-Schulz orthogonalisation of each update (5).", ge=1, advanced=True)
    MuonWithAuxAdam: bool = opt(False, "Muon with Adam", "MUON, MUON_ADV, ADAMUON_ADV: train the weights that are not hidden-layer matrices (biases, norms, embeddings, first and last layers) with an AdamW inside the optimizer. Off: Muon trains every weight.", advanced=True)
    muon_hidden_layers: str | None = opt(None, "Muon layers", "MUON, MUON_ADV, ADAMUON_ADV: comma-separated parts of layer names whose matrices Muon trains (the rest uses the AdamW). Blank = the model type's default, e.g. block, text_model.encoder.layers for SD/SDXL; transformer_blocks, encoder.block for SD3/Flux/PixArt.", advanced=True)
    muon_adam_regex: bool = opt(False, "Muon layers are regex", "MUON, MUON_ADV, ADAMUON_ADV: read Muon layers as regular expressions instead of plain text to look for.", advanced=True)
    muon_adam_lr: float | None = opt(None, "Muon Adam LR", "MUON, MUON_ADV, ADAMUON_ADV: learning rate of the AdamW part (blank: 3e-4 for MUON, 1e-6 for the others, as OneTrainer fills it; a OneTrainer config's null: its run's learning rate, as there). Muon itself uses the learning rate above, usually much higher (0.02 for MUON).", ge=0, advanced=True)
    muon_te1_adam_lr: float | None = opt(None, "Muon TE1 Adam LR", "MUON, MUON_ADV, ADAMUON_ADV: learning rate of the AdamW part for text encoder 1 (blank = Muon Adam LR).", ge=0, advanced=True)
    muon_te2_adam_lr: float | None = opt(None, "Muon TE2 Adam LR", "MUON, MUON_ADV, ADAMUON_ADV: learning rate of the AdamW part for text encoder 2 (blank = Muon Adam LR).", ge=0, advanced=True)
    muon_adam_config: dict[str, Any] | None = opt(default_factory=dict, label="Muon Adam settings", tooltip='MUON, MUON_ADV, ADAMUON_ADV: settings of the AdamW part, e.g. {"beta1": 0.9, "beta2": 0.95, "eps": 1e-10, "weight_decay": 0}; the _ADV ones also take their other adam_ settings without the prefix (e.g. "use_atan2").', advanced=True)
    rms_rescaling: bool | None = opt(True, "RMS rescaling", "MUON_ADV, ADAMUON_ADV: rescale the orthogonalised updates to the size of an AdamW update, so AdamW learning rates carry over.", advanced=True)
    normuon_variant: bool = opt(False, "NorMuon", "MUON_ADV, ADAMUON_ADV: normalise each row of the update by its own running size (NorMuon).", advanced=True)
    beta2_normuon: float | None = opt(None, "NorMuon beta2", "MUON_ADV with NorMuon: decay of the running size of each row (0.95).", ge=0, lt=1, advanced=True)
    low_rank_ortho: bool = opt(False, "Low-rank orthogonalisation", "MUON_ADV, ADAMUON_ADV: orthogonalise a low-rank sketch of the update (faster on large matrices).", advanced=True)
    ortho_rank: int | None = opt(None, "Orthogonalisation rank", "MUON_ADV, ADAMUON_ADV: rank of that sketch (128).", ge=1, advanced=True)
    accelerated_ns: bool = opt(False, "Accelerated Newton-Schulz", "MUON_ADV, ADAMUON_ADV: Newton-Schulz with coefficients that converge in fewer steps.", advanced=True)
    cautious_wd: bool = opt(False, "Cautious weight decay", "Apply weight decay only where it agrees with the update.", advanced=True)
    approx_mars: bool = opt(False, "Approximate MARS", "MUON_ADV, ADAMUON_ADV: approximate MARS variance reduction of the gradient.", advanced=True)
    auto_kappa_p: bool = opt(False, "Auto kappa p", "LION_ADV: choose the exponent of its update automatically per weight.", advanced=True)
    compile: bool = opt(False, "Compile", "_ADV optimizers: compile the optimizer step with torch.compile (slow first steps).", advanced=True)


@cache
def _defaults_table() -> dict[str, dict[str, Any]]:
    return json.loads((Path(__file__).with_name("optimizer_defaults.json")).read_text())


# OneTrainer's defaults that the libraries refuse: bitsandbytes' LARS and SGD_8BIT need momentum,
# schedule-free SGD interpolates with it, dadaptation's AdaGrad needs eps above 0. These replace them.
# And the fast path by default: the fused and foreach steps (OneTrainer turns foreach off) are used
# wherever torch has them for the device and dtype (training/optimizers/kernels.py decides and logs).
_FAST = {"fused": True, "foreach": True}
WORKING_DEFAULTS: dict[str, dict[str, Any]] = {
    "LARS": {"momentum": 0.9}, "LARS_8BIT": {"momentum": 0.9}, "SGD_8BIT": {"momentum": 0.9},
    "SCHEDULE_FREE_SGD": {"momentum": 0.9, "foreach": True}, "DADAPT_ADA_GRAD": {"eps": 1e-6},
    "ADAM": _FAST, "ADAMW": _FAST, "SGD": {"foreach": True}, "SCHEDULE_FREE_ADAMW": {"foreach": True},
}


def optimizer_param_defaults(optimizer: Optimizer | str) -> dict[str, Any]:
    """OneTrainer's default parameters for one optimizer ("Load defaults" on the page), with the
    few that its libraries refuse replaced by working ones and the fast kernels on (WORKING_DEFAULTS)."""
    name = optimizer.value if isinstance(optimizer, Optimizer) else str(optimizer)
    return {**_defaults_table().get(name, {}), **WORKING_DEFAULTS.get(name, {})}


def fused_back_pass_on(config: Any) -> bool:
    """Whether the run steps each weight inside the backward pass: `optimizer.fused_back_pass` on
    for an optimizer that offers it."""
    settings = config.optimizer
    return bool(settings.fused_back_pass) and "fused_back_pass" in optimizer_param_defaults(settings.optimizer)


# Optimizers that keep an average of the weights: the trainer switches them to it for sampling and
# saving, and (as OneTrainer does) runs them with a constant learning rate and no warmup.
SCHEDULE_FREE = frozenset({O.SCHEDULE_FREE_ADAMW, O.SCHEDULE_FREE_SGD, O.PRODIGY_PLUS_SCHEDULE_FREE})
# Optimizers that estimate their own step size: every learning rate should be 1.
ADAPTIVE_LR = frozenset({O.PRODIGY, O.PRODIGY_ADV, O.PRODIGY_PLUS_SCHEDULE_FREE, O.DADAPT_ADA_GRAD, O.DADAPT_ADAM,
                         O.DADAPT_ADAN, O.DADAPT_LION, O.DADAPT_SGD})


def optimizer_keys(optimizer: Optimizer | str) -> list[str]:
    """The config keys the page shows for this optimizer: its row of the defaults table, in schema order."""
    own = optimizer_param_defaults(optimizer)
    return [key for key in OptimizerConfig.model_fields if key in own]


def effective_settings(config: OptimizerConfig) -> dict[str, Any]:
    """The chosen optimizer's settings as the trainer uses them: the config's value, or the
    optimizer's default where the config leaves it blank ("inf" in the table is a float)."""
    out: dict[str, Any] = {}
    for key, default in optimizer_param_defaults(config.optimizer).items():
        value = getattr(config, key, None)
        value = default if value is None else value
        if isinstance(value, str) and value.lower() in ("inf", "infinity", "-inf", "-infinity", "nan"):
            value = float(value)
        out[key] = value
    return out


def _triton_installed(_: dict[str, Any]) -> bool:
    return importlib.util.find_spec("triton") is not None


# Settings the optimizer libraries refuse: (optimizers, key, ok(settings), why). Checked before a run
# (the doctor's errors) and again when the optimizer is built, so the message names the field.
_Limit = tuple[frozenset[Optimizer], str, Callable[[dict[str, Any]], bool], str]
_BNB_MOMENTUM = "bitsandbytes' {name} needs momentum above 0 (0.9 is usual)"
LIBRARY_LIMITS: list[_Limit] = [
    (frozenset({O.ADAM_8BIT, O.ADAMW_8BIT, O.LAMB_8BIT}), "amsgrad", lambda s: not s["amsgrad"],
     "bitsandbytes' {name} has no AMSGrad variant; turn AMSGrad off"),
    (frozenset({O.ADAM_8BIT, O.ADAMW_8BIT}), "optim_bits", lambda s: s["optim_bits"] in (None, 32),
     "{name} always keeps its state in 8 bits and bitsandbytes only accepts 32 here; leave it at 32"),
    (frozenset({O.LAMB_8BIT}), "max_unorm", lambda s: s["max_unorm"] in (None, 1.0),
     "bitsandbytes' LAMB_8BIT cannot clip the update norm; leave it at 1.0 or use LAMB"),
    (frozenset({O.LARS, O.LARS_8BIT, O.SGD_8BIT}), "momentum", lambda s: (s["momentum"] or 0) > 0, _BNB_MOMENTUM),
    (frozenset({O.SGD, O.SGD_8BIT, O.LARS, O.LARS_8BIT}), "nesterov",
     lambda s: not s["nesterov"] or ((s["momentum"] or 0) > 0 and not s["dampening"]),
     "Nesterov momentum needs momentum above 0 and dampening 0"),
    (frozenset({O.SCHEDULE_FREE_SGD}), "momentum", lambda s: 0 < (s["momentum"] or 0) < 1,
     "SCHEDULE_FREE_SGD interpolates with its momentum, which must lie between 0 and 1 (0.9 is usual)"),
    (frozenset({O.SCHEDULE_FREE_ADAMW}), "beta1", lambda s: 0 < (s["beta1"] or 0) < 1,
     "SCHEDULE_FREE_ADAMW interpolates with beta1, which must lie between 0 and 1 (0.9 is usual)"),
    (frozenset({O.RMSPROP_8BIT}), "centered", lambda s: not s["centered"], "bitsandbytes' RMSPROP_8BIT has no centered variant"),
    (frozenset({O.RMSPROP}), "centered", lambda s: not s["centered"] or s["optim_bits"] == 32,
     "centered RMSprop only exists with 32 optimizer bits"),
    (frozenset({O.RMSPROP, O.RMSPROP_8BIT}), "alpha", lambda s: s["alpha"] != 0, "RMSprop needs alpha above 0"),
    (frozenset({O.ADAGRAD_8BIT}), "lr_decay", lambda s: not s["lr_decay"], "bitsandbytes' {name} has no LR decay; set it to 0"),
    (frozenset({O.ADAGRAD_8BIT}), "initial_accumulator_value", lambda s: not s["initial_accumulator_value"],
     "bitsandbytes' {name} starts its accumulator at 0; set it to 0"),
    (frozenset({O.ADAGRAD}), "lr_decay", lambda s: not s["lr_decay"] or s["optim_bits"] == 32,
     "Adagrad has no LR decay with 8 optimizer bits; set it to 0 or use 32 bits"),
    (frozenset({O.ADAGRAD}), "initial_accumulator_value", lambda s: not s["initial_accumulator_value"] or s["optim_bits"] == 32,
     "Adagrad with 8 optimizer bits starts its accumulator at 0; set it to 0 or use 32 bits"),
    (frozenset({O.ADAGRAD, O.LAMB, O.LARS, O.RMSPROP, O.ADEMAMIX}), "optim_bits", lambda s: s["optim_bits"] in (8, 32),
     "the optimizer state has 32 or 8 bits"),
    (frozenset({O.DADAPT_ADA_GRAD}), "eps", lambda s: (s["eps"] or 0) > 0, "dadaptation's AdaGrad needs eps above 0 (1e-6 is usual)"),
    (frozenset({O.ADAFACTOR}), "warmup_init", lambda s: not s["warmup_init"] or s["relative_step"],
     "Adafactor's warmup initialization only works with relative step on"),
    (frozenset({O.LION}), "use_triton", lambda s: not s["use_triton"] or _triton_installed(s),
     "LION's Triton kernel needs the triton package (and a CUDA GPU); turn Use Triton off"),
]


# Settings a library takes but does not act on (as in OneTrainer, which uses the same libraries):
# the doctor warns when one is set away from what the library does anyway.
LIBRARY_IGNORES: list[_Limit] = [
    (frozenset({O.LAMB, O.LAMB_8BIT}), "bias_correction", lambda s: s["bias_correction"],
     "bitsandbytes' {name} always corrects the bias, so turning it off has no effect"),
    (frozenset({O.LAMB, O.LAMB_8BIT}), "adam_w_mode", lambda s: s["adam_w_mode"],
     "bitsandbytes' {name} always decays weights AdamW-style, so turning AdamW mode off has no effect"),
    (frozenset({O.LAMB}), "amsgrad", lambda s: not s["amsgrad"], "bitsandbytes' LAMB has no AMSGrad variant; it is ignored"),
    (frozenset({O.YOGI}), "adanorm", lambda s: not s["adanorm"], "pytorch-optimizer 4.1's YOGI has no AdaNorm; it is ignored"),
    (frozenset({O.ADABELIEF}), "amsgrad", lambda s: not s["amsgrad"],
     "pytorch-optimizer's ADABELIEF has no AMSGrad (OneTrainer's AdaBelief comes from timm); it is ignored"),
]


def optimizer_ignored(config: OptimizerConfig) -> list[str]:
    """Settings of the chosen optimizer that its library takes but ignores, each naming the field."""
    return _failing(LIBRARY_IGNORES, config)


def _failing(limits: list[_Limit], config: OptimizerConfig) -> list[str]:
    name = Optimizer(config.optimizer)
    settings = effective_settings(config)
    return [f"optimizer.{key}: {why.format(name=name.value)}" for names, key, ok, why in limits
            if name in names and key in settings and not ok(settings)]


def optimizer_problems(config: OptimizerConfig) -> list[str]:
    """Settings of the chosen optimizer that its library refuses, each naming the field."""
    return _failing(LIBRARY_LIMITS, config)
