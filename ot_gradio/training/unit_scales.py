"""Divisions by one out of the training process's steps.

diffusers' ResNet blocks end with `(input + hidden) / self.output_scale_factor` and its attention
processors with `hidden / attn.rescale_output_factor`; both are 1.0 in every model we train (SD
1.x/2.x, SDXL, their VAEs, PixArt, Würstchen / Cascade). A tensor divided by a float is a kernel
forward and another backward, even by one: 108 of the 3,459 operators of a SD 1.5 LoRA step, and a
small-batch step on a fast card waits on the CPU that launches its kernels (docs/PERFORMANCE.md §17).

`skip_unit_divisions` sets those attributes, where they are 1.0, to `UNIT`: one, for which
`tensor / UNIT` is the tensor itself (no kernel, no autograd node: 0.85 us of Python where the
division cost 2.5 us forward on this CPU, before its backward and a GPU's launch); any other tensor
operation computes with 1.0, and as a float subclass it is 1.0 to Python's arithmetic, copying and
pickling. On the tiny SD 1.5 UNet's LoRA step in float32 (54 divisions) the CPU's step time falls
from 48.9 to 47.5 ms (best of 300). The same numbers bit for bit (x / 1.0 is x in every floating
type), forward and backward; the models' configs, which saving writes, are not touched. Not under
`compile` (the trainer leaves the step as it is there: the compiler drops such divisions itself).
"""

from __future__ import annotations

import torch
from torch import nn

ATTRIBUTES = ("output_scale_factor", "rescale_output_factor")


class _Unit(float):
    """1.0, where dividing a tensor by it gives the tensor back. PyTorch hands an operation with an
    argument that has `__torch_function__` to it (checked in C++: under a microsecond, where a
    division by 1.0 costs a kernel and its backward; answering through `__rtruediv__` instead would
    cost PyTorch a caught TypeError, 13 us); any other tensor operation runs with 1.0 in its place,
    and Python's own arithmetic sees a float."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in _DIVISIONS and len(args) == 2 and isinstance(args[1], cls) and not kwargs:
            return args[0]
        return func(*(float(a) if isinstance(a, cls) else a for a in args), **(kwargs or {}))


_DIVISIONS = frozenset({torch.Tensor.div, torch.div, torch.true_divide, torch.Tensor.true_divide})
UNIT = _Unit(1.0)


def skip_unit_divisions(modules: list[nn.Module]) -> int:
    """Every `output_scale_factor` / `rescale_output_factor` of 1.0 in `modules` becomes `UNIT`.
    Returns how many."""
    count = 0
    for module in modules:
        for sub in module.modules():
            for name in ATTRIBUTES:
                value = getattr(sub, name, None)
                if type(value) in (float, int) and value == 1.0:
                    setattr(sub, name, UNIT)
                    count += 1
    return count
