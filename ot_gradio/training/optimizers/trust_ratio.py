"""A trust ratio of 1 for weights that are zero (bitsandbytes' LAMB and LARS, 8-bit ones included).

bitsandbytes scales each update so that its norm stays below ``max_unorm * ||w||``. A weight that is
all zeros, such as a LoRA's up matrix at the start, therefore gets an update of norm 0: it never
moves, and the LoRA never changes the model. The reference LAMB and LARS implementations use a
trust ratio of 1 where the weight norm is 0; this does the same, by stepping such a weight once
without the clipping. A weight is checked only until it has been seen nonzero, so a trained weight
costs nothing extra per step.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def _update_step(self: Any, group: dict[str, Any], p: torch.Tensor, gindex: int, pindex: int) -> Any:
    if id(p) in self._nonzero_weights:
        return self._update_step_clipped(group, p, gindex, pindex)
    if bool(p.detach().any()):
        self._nonzero_weights.add(id(p))
        return self._update_step_clipped(group, p, gindex, pindex)
    clip = self.args.max_unorm
    self.args.max_unorm = 0.0  # this step: trust ratio 1
    try:
        return self._update_step_clipped(group, p, gindex, pindex)
    finally:
        self.args.max_unorm = clip


def unit_trust_ratio_for_zero_weights(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Make a bitsandbytes optimizer that clips updates relative to the weight norm (``max_unorm``
    above 0: LAMB, LARS) step all-zero weights unclipped. Other optimizers are returned unchanged."""
    args = getattr(optimizer, "args", None)
    if getattr(args, "max_unorm", 0.0) <= 0.0 or not callable(getattr(optimizer, "update_step", None)):
        return optimizer
    if getattr(optimizer, "_nonzero_weights", None) is not None:
        return optimizer
    optimizer._nonzero_weights = set()
    optimizer._update_step_clipped = optimizer.update_step
    optimizer.update_step = types.MethodType(_update_step, optimizer)
    return optimizer
