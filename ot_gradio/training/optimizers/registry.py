"""The optimizer registry: what an entry is, how its settings are resolved and how it is built.

An entry names the config keys it passes to the constructor (OneTrainer's key -> the library's
argument) and which keys are packed into one tuple argument (``betas``, Adafactor's ``eps``).
Values come from the config, or from OneTrainer's defaults table where the config leaves them blank.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ...config.catalogue import NOT_AVAILABLE_BECAUSE
from ...config.enums import Optimizer as O
from ...config.muon_layers import MUON_OPTIMIZERS
from ...config.optimizer import effective_settings, optimizer_problems
from .kernels import choose_kernels
from .muon import split_for_muon
from .percentile_clipping import enable_percentile_clipping
from .stochastic_rounding import enable_stochastic_rounding
from .trust_ratio import unit_trust_ratio_for_zero_weights


@dataclass(frozen=True)
class OptimizerEntry:
    name: O
    build: Callable[..., torch.optim.Optimizer]  # build(param_groups, lr=..., **kwargs)
    keys: dict[str, str]  # config key -> constructor argument
    tuples: dict[str, tuple[str, ...]] = field(default_factory=dict)  # argument -> config keys packed into it


OPTIMIZERS: dict[O, OptimizerEntry] = {}

# Keys of the defaults table that are not constructor arguments: the trainer acts on the first two
# and on percentile clipping itself; block-wise and cautious exist in OneTrainer's libraries but
# not in the ones installed here; the Muon ones choose the param groups.
NOT_CONSTRUCTOR_ARGS = {
    "stochastic_rounding": "applied around the step for bfloat16 weights (stochastic_rounding.py)",
    "fused_back_pass": "the trainer steps per weight in the backward pass (fused_back_pass.py)",
    "block_wise": "bitsandbytes 0.50 always quantizes block-wise",
    "percentile_clipping": "applied before the step (percentile_clipping.py): bitsandbytes 0.50 dropped it",
    "use_cautious": "pytorch-optimizer's CAME has no cautious variant",
    **dict.fromkeys(("MuonWithAuxAdam", "muon_hidden_layers", "muon_adam_regex", "muon_adam_lr", "muon_te1_adam_lr",
                     "muon_te2_adam_lr"), "the Muon optimizers' split of the weights into Muon and AdamW groups (muon.py)"),
}
# Keys of one optimizer's row that its installed library lacks (pytorch-optimizer 4.1 against the
# 3.6 that OneTrainer pins, and its AdaBelief against timm's); the doctor warns when one is set.
LIBRARY_LACKS: dict[O, dict[str, str]] = {
    O.YOGI: {"adanorm": "pytorch-optimizer 4.1's Yogi has no AdaNorm", "r": "the AdaNorm power, without AdaNorm"},
    O.ADABELIEF: {"amsgrad": "pytorch-optimizer's AdaBelief has no AMSGrad (AMS bound is its nearest)"},
}


def register(name: O, build: Callable[..., torch.optim.Optimizer], keys: dict[str, str] | list[str],
             tuples: dict[str, tuple[str, ...]] | None = None) -> None:
    OPTIMIZERS[name] = OptimizerEntry(name, build, dict(keys) if isinstance(keys, dict) else {k: k for k in keys}, tuples or {})


def _entry(optimizer_config: Any) -> OptimizerEntry:
    name = O(optimizer_config.optimizer)
    if name not in OPTIMIZERS:
        available = ", ".join(o.value for o in OPTIMIZERS)
        why = f" ({NOT_AVAILABLE_BECAUSE[name]})" if name in NOT_AVAILABLE_BECAUSE else ""
        raise ValueError(f"optimizer.optimizer: {name.value} is not available yet{why}; use one of {available}")
    return OPTIMIZERS[name]


def resolve_settings(optimizer_config: Any) -> dict[str, Any]:
    """The constructor arguments: the config's value where set, else OneTrainer's default."""
    entry = _entry(optimizer_config)
    settings = effective_settings(optimizer_config)
    kwargs = {arg: settings[key] for key, arg in entry.keys.items() if settings.get(key) is not None}
    for arg, keys in entry.tuples.items():
        values = [settings.get(k) for k in keys]
        if all(v is None for v in values):
            continue
        missing = [k for k, v in zip(keys, values, strict=True) if v is None]
        if missing:
            raise ValueError(f"optimizer.{missing[0]}: {entry.name.value} needs a value here (it uses {', '.join(keys)} together)")
        kwargs[arg] = tuple(values)
    return kwargs


def create_optimizer(param_groups: list[dict[str, Any]], optimizer_config: Any, device: torch.device,
                     names: Mapping[int, str] | None = None, model_type: Any = None, warmup_steps: int = 0) -> torch.optim.Optimizer:
    """Build the configured optimizer over the trainer's param groups ({"params", "lr", "name"}).
    The Muon optimizers split the groups by the weights' names (`parameter_names`) and the model type.
    ``warmup_steps`` is the run's learning-rate warmup in optimizer steps: the adv-optm optimizers with
    Kourkoutas-beta hold beta2 over it (their `k_warmup_steps`), as OneTrainer passes its warmup."""
    entry = _entry(optimizer_config)
    problems = optimizer_problems(optimizer_config)
    if problems:
        raise ValueError("; ".join(problems))
    if entry.name in MUON_OPTIMIZERS:
        param_groups = split_for_muon(param_groups, optimizer_config, names, model_type)
    kwargs = resolve_settings(optimizer_config)
    if "kourkoutas_beta" in entry.keys:
        kwargs["k_warmup_steps"] = int(warmup_steps)
    params = [p for g in param_groups for p in g["params"]]
    kwargs, step_kernel = choose_kernels(entry.keys, kwargs, params)
    if kwargs.get("use_triton") and device.type != "cuda":
        raise ValueError(f"optimizer.use_triton: the Triton kernel of {entry.name.value} needs a CUDA GPU; turn Use Triton off")
    lr = param_groups[0]["lr"] if param_groups and "lr" in param_groups[0] else 1e-3
    optimizer = unit_trust_ratio_for_zero_weights(entry.build(param_groups, lr=lr, **kwargs))
    optimizer.step_kernel = step_kernel
    settings = effective_settings(optimizer_config)
    rounds_itself = "stochastic_rounding" in entry.keys  # adv-optm, Prodigy Plus: the library rounds
    if settings.get("stochastic_rounding") and not rounds_itself and any(p.dtype == torch.bfloat16 for p in params):
        enable_stochastic_rounding(optimizer)
    enable_percentile_clipping(optimizer, settings.get("percentile_clipping"))  # (None for optimizers without it)
    return optimizer


def optimizer_train_mode(optimizer: Any) -> None:
    """Schedule-free optimizers train on their own interpolated weights: call before training steps."""
    switch = getattr(optimizer, "train", None)
    if callable(switch):
        switch()


def optimizer_eval_mode(optimizer: Any) -> None:
    """Schedule-free optimizers keep the weights to use in an average: switch to it before sampling,
    saving or a backup (the next `optimizer_train_mode` switches back). A no-op for other optimizers."""
    switch = getattr(optimizer, "eval", None)
    if callable(switch):
        switch()
