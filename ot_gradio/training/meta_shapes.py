"""Output shapes of the normalisation ops for the memory planner's meta probe, without torch's
Python reference implementations.

On meta tensors torch computes group and layer norm (and their backward passes) through its
Python decompositions, which check and broadcast every intermediate: in the probe of a small SD
UNet they took 1-2.4 ms per call, a third of the probe for 4% of its ops; adding or multiplying two
tensors of one shape took 0.14 ms, another fifth of it, and a matrix product 0.2 ms. These functions return
what those decompositions return (the same shapes, dtypes and strides; tests/training/
test_meta_shapes.py compares them), straight from the inputs' sizes. Only meta tensors reach them
(memory_probe.LiveBytes checks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def _like(t: torch.Tensor) -> torch.Tensor:
    """A contiguous meta tensor of t's shape and dtype (torch.empty: empty_like is itself a Python
    reference on meta tensors, 0.17 ms a call)."""
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def _same_layout(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor laid out like t (contiguous or channels-last, as the norms keep it)."""
    if t.is_contiguous():
        return _like(t)
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return torch.empty_like(t, device="meta")


def _stats(t: torch.Tensor, shape: list[int], *, wide: bool = False) -> torch.Tensor:
    """Mean or rstd: in the input's dtype, or with `wide` in float32 for 16-bit inputs (layer norm)."""
    dtype = torch.float32 if wide and t.dtype in (torch.float16, torch.bfloat16) else t.dtype
    return torch.empty(shape, dtype=dtype, device="meta")


def group_norm(input, weight, bias, n, c, hw, group, eps):  # noqa: ANN001, ARG001 - aten's signature
    return _same_layout(input), _stats(input, [n, group]), _stats(input, [n, group])


def group_norm_backward(grad_out, input, mean, rstd, weight, n, c, hw, group, mask):  # noqa: ANN001, ARG001
    grad_input = _same_layout(input) if mask[0] else None
    grad_weight = torch.empty([c], dtype=input.dtype, device="meta") if mask[1] else None
    grad_bias = torch.empty([c], dtype=input.dtype, device="meta") if mask[2] else None
    return grad_input, grad_weight, grad_bias


def layer_norm(input, normalized_shape, weight, bias, eps):  # noqa: ANN001, ARG001
    keep = input.dim() - len(normalized_shape)
    stats = [*input.shape[:keep], *([1] * len(normalized_shape))]
    return _like(input), _stats(input, stats, wide=True), _stats(input, stats, wide=True)


def layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, mask):  # noqa: ANN001, ARG001
    grad_input = _like(input) if mask[0] else None
    grad_weight = _like(weight) if mask[1] and weight is not None else None
    grad_bias = _like(bias) if mask[2] and bias is not None else None
    return grad_input, grad_weight, grad_bias


def elementwise(a, b):  # noqa: ANN001
    """add / mul / sub / div of a contiguous floating tensor and a tensor of its shape and dtype,
    a number or a floating scalar tensor (the usual cases: the output is like the first); anything
    else goes to torch (None)."""
    if not (a.is_floating_point() and a.is_contiguous()):
        return None
    if isinstance(b, torch.Tensor):
        alike = b.device.type == "meta" and a.shape == b.shape and a.dtype == b.dtype and b.is_contiguous()
        scalar = b.dim() == 0 and b.is_floating_point() and a.dim() > 0
        return _like(a) if alike or scalar else None
    return _like(a) if isinstance(b, (int, float)) and not isinstance(b, bool) else None


def mm(a, b):  # noqa: ANN001
    """Matrix product of two 2-D floating tensors of one dtype (else torch: None)."""
    if a.dim() == 2 and isinstance(b, torch.Tensor) and b.dim() == 2 and a.dtype == b.dtype and a.is_floating_point():
        return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device="meta")
    return None


def addmm(bias, a, b):  # noqa: ANN001
    """bias + a @ b (a linear layer's forward) for tensors of one floating dtype (else torch: None)."""
    if isinstance(bias, torch.Tensor) and bias.dtype == a.dtype and bias.device.type == "meta":
        return mm(a, b)
    return None


FAST: dict[Any, Callable[..., Any]] = {
    aten.mm.default: mm,
    aten.addmm.default: addmm,
    aten.add.Tensor: elementwise,
    aten.mul.Tensor: elementwise,
    aten.sub.Tensor: elementwise,
    aten.div.Tensor: elementwise,
    aten.native_group_norm.default: group_norm,
    aten.native_group_norm_backward.default: group_norm_backward,
    aten.native_layer_norm.default: layer_norm,
    aten.native_layer_norm_backward.default: layer_norm_backward,
}
