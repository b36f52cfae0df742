"""Frozen 16-bit layer and group norms in a training step: no casts at every call.

CUDA's autocast runs layer and group norms in float32: at each call it casts the input, the weight
and the bias up, and the next product casts the float32 output back down (and the backward pass
casts both gradients). A frozen weight's cast is not even kept between calls (autocast keeps only
those of weights that train): SD 1.5's UNet and text encoder in float16 make about 900 such
copies a step, each a kernel launch, and a small-batch step on a fast card waits on the CPU that
launches its kernels (docs/PERFORMANCE.md §17). While a step lasts (`step_norms`):

- in a FLOAT_16 run, a norm whose input comes in float16, its weights' type, runs in float16 with
  autocast off for the call, as diffusers' float16 inference runs them: the kernels (CUDA's and the
  CPU's) still accumulate the mean and variance in float32; only the output is rounded to float16,
  which the next product would do anyway. No copies at all. On the tiny UNet the LoRA gradients'
  error against a float32 step grows from 0.196 % to 0.207 % (tests/training/test_norm_casts.py);
- otherwise (bfloat16, whose 8-bit mantissa makes that rounding cost more, or a float32 input), the
  norm reads float32 copies of its weights made once for all of them (a concatenation and one cast
  per weight type): the same numbers as autocast's casts (a 16-bit number is exactly a float32 one),
  bit for bit, without the weights' copies.

Only modules of exactly `nn.LayerNorm` / `nn.GroupNorm` (their forward is one F.layer_norm /
F.group_norm call), with 16-bit weights that do not train, on the step's device, and only where
autocast is on for the call (else the module's own forward: a 16-bit input beside float32
weights is what autocast, or a CPU kernel, takes, not every GPU kernel). Samples and saving,
outside the step, see the modules as they are. The memory planner's probe runs its meta step so
too (memory_probe.py): the float16 outputs are what autograd keeps.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..models.common import autocast_dtype
from .lora_forward import on_device
from .meta_autocast import emulated_dtype

NORMS = (nn.LayerNorm, nn.GroupNorm)
HALF = (torch.float16, torch.bfloat16)
DEVICES = ("cuda", "cpu", "meta")  # whose norms take a float32 weight beside what autocast gives them (meta: the planner's probe)


def affine_norms(modules: list[nn.Module]) -> list[nn.Module]:
    """The layer and group norms of `modules` (exactly those classes) that have a weight."""
    return [m for module in modules for m in module.modules() if type(m) in NORMS and isinstance(m.weight, torch.Tensor)]


def _frozen_half(norm: nn.Module, device: torch.device) -> bool:
    if "forward" in norm.__dict__:  # another wrapper's forward: left alone
        return False
    tensors = [t for t in (norm.weight, norm.bias) if t is not None]
    return all(t.dtype in HALF and not t.requires_grad and on_device(t, device) for t in tensors)


def _forward(self: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    kind = x.device.type
    autocast = emulated_dtype() if x.is_meta else autocast_dtype(kind)
    if autocast is None:  # autocast off here (a part run without it): as the module is
        return type(self).forward(self, x)
    if autocast == x.dtype == self.weight.dtype == torch.float16 and (self.bias is None or self.bias.dtype == torch.float16):
        # float16 in, float16 weights: no casts
        if x.is_meta:  # the memory planner's probe: past its emulation of autocast's float32 norms
            return _native(self, x)
        with torch.autocast(kind, enabled=False):
            return type(self).forward(self, x)
    if type(self) is nn.LayerNorm:
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)
    return F.group_norm(x, self.num_groups, weight, bias, self.eps)


def _native(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The norm's own operator, which meta_autocast.py's emulation does not replace."""
    if type(self) is nn.LayerNorm:
        return torch.native_layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)[0]
    n, c = x.shape[0], x.shape[1]
    return torch.native_group_norm(x, self.weight, self.bias, n, c, x[0, 0].numel(), self.num_groups, self.eps)[0]


@contextlib.contextmanager
def step_norms(norms: list[nn.Module], dtype: torch.dtype | None, device: torch.device) -> Iterator[None]:
    """While the block lasts (a training step's forward and backward, recomputed blocks included),
    the frozen 16-bit ones of `norms` compute as the module's notes say: in float16 where all is
    float16, else with float32 copies of their weights made here. Nothing is done without an
    autocast `dtype` or on other devices than CUDA, the CPU and meta (the planner's probe)."""
    device = torch.device(device)
    if dtype is None or device.type not in DEVICES:
        yield
        return
    chosen = [norm for norm in norms if _frozen_half(norm, device)]
    groups: dict[torch.dtype, list[torch.Tensor]] = {}
    for norm in chosen:
        for t in (norm.weight, norm.bias):
            if t is not None:
                groups.setdefault(t.dtype, []).append(t)
    copies: dict[int, torch.Tensor] = {}
    for tensors in groups.values():
        flat = torch.cat([t.detach().reshape(-1) for t in tensors]).float()
        for t, part in zip(tensors, flat.split([t.numel() for t in tensors]), strict=True):
            copies[id(t)] = part.view(t.shape)
    for norm in chosen:
        bias = copies[id(norm.bias)] if norm.bias is not None else None
        norm.forward = types.MethodType(lambda self, x, w=copies[id(norm.weight)], b=bias: _forward(self, w, b, x), norm)
    try:
        yield
    finally:
        for norm in chosen:
            norm.__dict__.pop("forward", None)
