"""Stochastic rounding of bfloat16 weights (the optimizer setting "Stochastic rounding").

bfloat16 keeps 8 bits of mantissa: an update smaller than half the gap between two bfloat16 numbers
is rounded away, so with a small learning rate the weights stop moving. As OneTrainer does, the step
is computed in float32 and the result rounded up or down at random, up with a probability equal to
the remainder, so updates survive on average. The optimizer state of those weights is float32.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def copy_stochastic_(target: torch.Tensor, source: torch.Tensor) -> None:
    """Round float32 ``source`` into bfloat16 ``target``: add random low 16 bits, then cut them off."""
    bits = torch.randint_like(source, 0, 1 << 16, dtype=torch.int32)
    bits.add_(source.view(torch.int32))
    bits.bitwise_and_(-65536)
    target.copy_(bits.view(torch.float32))


def _rounded_step(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
    swapped = []
    for group in self.param_groups:
        for p in group["params"]:
            if p.dtype == torch.bfloat16 and p.grad is not None:
                grad = p.grad
                p.grad = None
                p.data = p.data.float()
                p.grad = grad.float()
                swapped.append((p, grad))
    try:
        return self._step_before_rounding(*args, **kwargs)
    finally:
        for p, grad in swapped:
            full = p.data
            p.grad = None
            p.data = torch.empty_like(full, dtype=torch.bfloat16)
            copy_stochastic_(p.data, full)
            p.grad = grad


def load_state_exactly(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any], load: Any) -> None:
    """`load(state_dict)` (torch's load_state_dict), then the saved state tensors put back as they
    were saved: torch casts floating state to the weight's dtype, and the float32 moments of a
    bfloat16 weight came back rounded to bfloat16 (a resumed run drifted from an unbroken one)."""
    load(state_dict)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    ids = [pid for group in state_dict["param_groups"] for pid in group["params"]]
    for pid, p in zip(ids, params, strict=True):
        for key, value in state_dict["state"].get(pid, {}).items():
            if torch.is_tensor(value) and value.is_floating_point() and key != "step" and p in optimizer.state:
                optimizer.state[p][key] = value.to(device=p.device, copy=True)


def _load_state_dict_float32(self: torch.optim.Optimizer, state_dict: dict[str, Any]) -> None:
    """The state of bfloat16 weights stays float32, exactly as saved."""
    load_state_exactly(self, state_dict, self._load_state_dict_before_rounding)


def enable_stochastic_rounding(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Make ``optimizer.step`` round its bfloat16 weights stochastically (bound methods, so an LR
    scheduler can still wrap the step)."""
    if getattr(optimizer, "stochastic_rounding", False):
        return optimizer
    optimizer._step_before_rounding = optimizer.step
    optimizer._load_state_dict_before_rounding = optimizer.load_state_dict
    optimizer.step = types.MethodType(_rounded_step, optimizer)
    optimizer.load_state_dict = types.MethodType(_load_state_dict_float32, optimizer)
    optimizer.stochastic_rounding = True
    return optimizer
