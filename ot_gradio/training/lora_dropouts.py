"""kohya's rank and module dropout on plain LoRA layers (`lora_rank_dropout`, `lora_module_dropout`).

While a layer trains (its `training` flag), as sd-scripts' `networks/lora.py` does:

- rank dropout: each rank of the down projection's output is kept for each sample with
  probability 1 - p, and the kept ones scaled by 1 / (1 - p), as if the rank had changed;
- module dropout: the whole LoRA of the layer is left out of this forward with probability p.

They are forward hooks on the layer's down (rank) and up (module) projections, so peft's own
forward runs them: such a layer leaves the shorter forward of lora_forward.py (`ot_dropouts`).
In evaluation (samples, validation) nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import torch
from torch import nn

from .lora import lora_layers
from .lora_variants import ADAPTER_NAME


def _rank_dropout(module: nn.Module, inputs: tuple, out: torch.Tensor, *, p: float) -> torch.Tensor | None:
    if not module.training:
        return None
    conv = isinstance(module, nn.Conv2d)  # [B, rank, H, W]; a linear's [B, ..., rank]
    keep = torch.rand(out.shape[0], out.shape[1] if conv else out.shape[-1], device=out.device) > p
    shape = (*keep.shape, *([1] * (out.ndim - 2))) if conv else (keep.shape[0], *([1] * (out.ndim - 2)), keep.shape[1])
    return out * keep.view(shape).to(out.dtype) / (1.0 - p)


def _module_dropout(module: nn.Module, inputs: tuple, out: torch.Tensor, *, p: float) -> torch.Tensor | None:
    if module.training and torch.rand(()).item() < p:
        return out * 0
    return None


def install_lora_dropouts(modules: Iterable[nn.Module], rank: float, module: float) -> int:
    """The hooks on every plain LoRA layer of `modules` (DoRA's runs its own path: none there).
    Returns how many layers got them."""
    from peft.tuners.lora import LoraLayer

    if not rank and not module:
        return 0
    count = 0
    for part in modules:
        for layer in lora_layers(part).values():
            if not isinstance(layer, LoraLayer) or ADAPTER_NAME in layer.lora_magnitude_vector:
                continue
            if rank:
                layer.lora_A[ADAPTER_NAME].register_forward_hook(partial(_rank_dropout, p=rank))
            if module:
                layer.lora_B[ADAPTER_NAME].register_forward_hook(partial(_module_dropout, p=module))
            layer.ot_dropouts = True
            count += 1
    return count
