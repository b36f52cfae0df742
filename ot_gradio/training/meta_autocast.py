"""CUDA autocast's casts, for the memory planner's probe on meta tensors.

A GPU trains under autocast (train_dtype FLOAT_16 / BFLOAT_16): matrix products and convolutions
cast their inputs to the 16-bit type, and the norms (GroupNorm, LayerNorm) run in float32, so
their inputs are cast up and their outputs, with whatever reads them next (a ResNet's SiLU), are
float32. Autocast does not act on meta tensors, so a probe that only cast every weight to the
16-bit type counted all of that in 16 bits: on an H200 the SD 1.5 LoRA step's peak was 1.16x the
estimate at batch 1 and 1.29x at batch 4, SDXL's 1.17x (docs/PERFORMANCE.md section 17). Under
`autocast_on_meta` the probe's weights keep the types they have in training and these functions
cast their meta inputs as autocast would: the cast copies that autograd saves are then counted,
and so are the 16-bit copies of float32 weights that train (a fine-tune's).

Only the functions of a diffusion step are listed (autocast's CUDA policy,
aten/src/ATen/autocast_mode.cpp): the products, convolutions and attention in the 16-bit type,
the group and layer norms in float32. Other functions take their inputs as they come (mixed
types promote, as they do under autocast). The functions are replaced where the models look them
up (`torch.nn.functional.linear`, `torch.matmul`, `Tensor.__matmul__`, ...) for the probe's
duration, not by a torch function mode: the backward pass's recomputation of checkpointed blocks
runs outside such a mode and must cast as the forward did. Tensors on other devices pass through
untouched (a caption encoded for real while the probe runs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten, tree_map

LOWER_PRECISION = (
    (F, "linear"), (F, "bilinear"), (F, "conv1d"), (F, "conv2d"), (F, "conv3d"), (F, "conv_transpose1d"), (F, "conv_transpose2d"),
    (F, "conv_transpose3d"), (F, "scaled_dot_product_attention"), (torch, "matmul"), (torch, "mm"), (torch, "bmm"),
    (torch, "baddbmm"), (torch, "addmm"), (torch, "addbmm"), (torch, "einsum"),
    (torch.Tensor, "matmul"), (torch.Tensor, "__matmul__"), (torch.Tensor, "mm"), (torch.Tensor, "bmm"),
)
FLOAT32 = ((F, "group_norm"), (F, "layer_norm"), (torch, "group_norm"), (torch, "layer_norm"))


def _casting(original: Callable, dtype: torch.dtype) -> Callable:
    def cast(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.device.type == "meta" and t.is_floating_point() and t.dtype != dtype \
                and t.element_size() > 1:  # float8 codes are read by their own layers
            return t.to(dtype)
        return t

    @functools.wraps(original)
    def as_under_autocast(*args: Any, **kwargs: Any) -> Any:
        if any(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in tree_flatten((args, kwargs))[0]):
            args, kwargs = tree_map(cast, (args, kwargs))
        return original(*args, **kwargs)

    return as_under_autocast


_ON: list[torch.dtype] = []  # the type of the emulation in force (autocast_on_meta), innermost last


def emulated_dtype() -> torch.dtype | None:
    """The 16-bit type `autocast_on_meta` casts meta tensors to while it is on, else None (for code
    that casts as autocast would, e.g. lora_forward's input cast)."""
    return _ON[-1] if _ON else None


@contextmanager
def autocast_on_meta(dtype: torch.dtype) -> Iterator[None]:
    """While on, the functions above cast their floating meta tensors as CUDA autocast to `dtype`
    would; put back afterwards."""
    replaced: list[tuple[Any, str, Any]] = []
    _ON.append(dtype)
    try:
        for names, target in ((LOWER_PRECISION, dtype), (FLOAT32, torch.float32)):
            for owner, name in names:
                original = getattr(owner, name)
                replaced.append((owner, name, original))
                setattr(owner, name, _casting(original, target))
        yield
    finally:
        _ON.pop()
        for owner, name, original in reversed(replaced):
            setattr(owner, name, original)


def emulates_autocast(precision: Any) -> bool:
    """A run that trains under CUDA autocast (the probe then follows it on meta)."""
    return precision.dtype is not None and precision.device.type == "cuda"


__all__ = ["FLOAT32", "LOWER_PRECISION", "autocast_on_meta", "emulated_dtype", "emulates_autocast"]
