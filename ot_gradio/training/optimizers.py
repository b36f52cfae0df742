"""Optimizers: one registry entry per optimizer, with OneTrainer's names and defaults.

Each entry names the config keys it takes (OneTrainer's key -> the library's argument) and how
to build it. The defaults table is config/optimizer_defaults.json (OneTrainer's own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..config.enums import Optimizer as O
from ..config.optimizer import optimizer_param_defaults


@dataclass(frozen=True)
class OptimizerEntry:
    name: O
    build: Callable[..., torch.optim.Optimizer]
    keys: dict[str, str]  # config key -> constructor argument
    betas: bool = False  # beta1/beta2 are passed as betas=(beta1, beta2)


OPTIMIZERS: dict[O, OptimizerEntry] = {}


def register(name: O, build: Callable[..., torch.optim.Optimizer], keys: dict[str, str] | list[str], betas: bool = False) -> None:
    OPTIMIZERS[name] = OptimizerEntry(name, build, dict(keys) if isinstance(keys, dict) else {k: k for k in keys}, betas)


_ADAM_KEYS = ["eps", "weight_decay", "amsgrad", "foreach", "fused", "maximize", "capturable", "differentiable"]
register(O.ADAMW, torch.optim.AdamW, _ADAM_KEYS, betas=True)
register(O.ADAM, torch.optim.Adam, _ADAM_KEYS, betas=True)
register(O.SGD, torch.optim.SGD, ["momentum", "dampening", "weight_decay", "nesterov", "foreach", "maximize", "differentiable", "fused"])
register(O.ADAGRAD, torch.optim.Adagrad, ["lr_decay", "weight_decay", "initial_accumulator_value", "eps", "foreach", "maximize", "differentiable", "fused"])
register(O.RMSPROP, torch.optim.RMSprop, ["alpha", "eps", "weight_decay", "momentum", "centered", "foreach", "maximize", "differentiable", "capturable"])


def resolve_settings(optimizer_config: Any) -> dict[str, Any]:
    """The constructor arguments: the config's value where set, else OneTrainer's default."""
    name = O(optimizer_config.optimizer)
    if name not in OPTIMIZERS:
        available = ", ".join(o.value for o in OPTIMIZERS)
        raise ValueError(f"optimizer.optimizer: {name.value} is not available yet; use one of {available}")
    entry = OPTIMIZERS[name]
    defaults = optimizer_param_defaults(name)

    def value(key: str) -> Any:
        v = getattr(optimizer_config, key, None)
        return defaults.get(key) if v is None else v

    kwargs: dict[str, Any] = {}
    for key, arg in entry.keys.items():
        v = value(key)
        if v is not None:
            kwargs[arg] = v
    if entry.betas:
        kwargs["betas"] = (value("beta1") if value("beta1") is not None else 0.9, value("beta2") if value("beta2") is not None else 0.999)
    return kwargs


def create_optimizer(param_groups: list[dict[str, Any]], optimizer_config: Any, device: torch.device) -> torch.optim.Optimizer:
    entry = OPTIMIZERS.get(O(optimizer_config.optimizer))
    kwargs = resolve_settings(optimizer_config)
    if kwargs.get("fused") and kwargs.get("foreach"):
        kwargs["foreach"] = False  # torch refuses both; fused is the faster one
    if kwargs.get("fused") and device.type not in ("cuda", "cpu", "mps"):
        kwargs["fused"] = False
    if kwargs.get("fused") and any(p.dtype not in (torch.float32, torch.float16, torch.bfloat16) for g in param_groups for p in g["params"]):
        kwargs["fused"] = False
    assert entry is not None
    return entry.build(param_groups, **kwargs)
