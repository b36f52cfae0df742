"""A shorter forward for plain LoRA layers while they train.

peft's LoRA `Linear` and `Conv2d` layers compute `base(x) + lora_B(lora_A(dropout(x))) * scaling`,
and check their arguments, loop over the active adapters and call three submodules on every
call. A training step of the default `full` preset makes 282 such calls forward (SD 1.5's UNet
layout has 282 linear and convolution layers) and their backward passes. This forward computes the same
sum from the same parameters with the sum and the scaling in one operation
(`torch.add(base, lora, alpha=scaling)`), which makes one autograd node fewer per layer too:
4-5 ms of a 130 ms step on the benchmark model (docs/PERFORMANCE.md §10c).

It is installed only on layers where it computes exactly what peft would: one adapter (ours),
plain LoRA (no DoRA or other variant), no dropout. Anything else at call time (adapters turned
off or merged, another adapter active, extra arguments) goes to peft's own forward, so sampling,
merging and scaling through peft keep working. Parameters are read when the layer runs, so the
memory planner's meta stand-ins and a changed `scaling` are seen.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn

from ..models.common import autocast_dtype
from .lora_variants import ADAPTER_NAME

_ACTIVE = [ADAPTER_NAME]


def _plain(layer: nn.Module) -> bool:
    """One adapter, ours, vanilla LoRA without dropout, on a layer of exactly peft's class."""
    from peft.tuners.lora import layer as lora_layer  # noqa: PLC0415

    if type(layer) not in (lora_layer.Linear, lora_layer.Conv2d):
        return False
    if list(layer.lora_A.keys()) != _ACTIVE or ADAPTER_NAME in layer.lora_variant:
        return False
    if getattr(layer, "fan_in_fan_out", False) or getattr(layer, "lora_bias", {}).get(ADAPTER_NAME, False):
        return False
    return isinstance(layer.lora_dropout[ADAPTER_NAME], nn.Identity)


def _general(layer: nn.Module, args: tuple, kwargs: dict) -> bool:
    return bool(args or kwargs) or layer.disable_adapters or layer.merged or layer.active_adapters != _ACTIVE


def _sum(result: torch.Tensor, lora: torch.Tensor, scaling: float) -> torch.Tensor:
    if lora.dtype == result.dtype:
        return torch.add(result, lora, alpha=scaling)
    return (result + lora * scaling).to(result.dtype)  # peft's order, then its cast back


def _cast_input(self: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """peft's cast of the input to the adapter's type, left out under autocast: the product casts
    its inputs to the autocast type anyway, so the cast there (and its backward) only adds two
    copies per layer (on a GPU, SD 1.5's UNet at batch 1 launches about 5,000 kernels a step and
    waits on their launching, not on the matrix products; docs/PERFORMANCE.md §17)."""
    if x.dtype == dtype or not self.cast_input_dtype_enabled or autocast_dtype(x.device.type) is not None:
        return x
    return x.to(dtype)


def _linear_forward(self: nn.Module, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if _general(self, args, kwargs):
        return type(self).forward(self, x, *args, **kwargs)
    result = self.base_layer(x)
    a = self.lora_A[ADAPTER_NAME].weight
    x = _cast_input(self, x, a.dtype)
    return _sum(result, F.linear(F.linear(x, a), self.lora_B[ADAPTER_NAME].weight), self.scaling[ADAPTER_NAME])


def _conv_forward(self: nn.Module, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if _general(self, args, kwargs):
        return type(self).forward(self, x, *args, **kwargs)
    result = self.base_layer(x)
    down, up = self.lora_A[ADAPTER_NAME], self.lora_B[ADAPTER_NAME]
    x = _cast_input(self, x, down.weight.dtype)
    lora = up._conv_forward(down._conv_forward(x, down.weight, down.bias), up.weight, up.bias)
    return _sum(result, lora, self.scaling[ADAPTER_NAME])


def install_lora_forward(layers: list[nn.Module]) -> int:
    """The shorter forward on each layer of `layers` it fits (see the module's notes). Returns
    how many got it."""
    from peft.tuners.lora import layer as lora_layer  # noqa: PLC0415

    count = 0
    for layer in layers:
        if not _plain(layer):
            continue
        forward = _linear_forward if type(layer) is lora_layer.Linear else _conv_forward
        layer.forward = types.MethodType(forward, layer)  # an instance attribute: nn.Module.__call__ finds it
        count += 1
    return count
