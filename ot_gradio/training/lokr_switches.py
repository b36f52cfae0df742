"""OneTrainer's LoKr switches on peft's LoKr layers.

- `lokr_full_matrix`: w2 is one whole matrix (`lokr_w2`) whatever `lokr_dim` is (peft picks a
  product w2_a @ w2_b when the rank is under half the factor's sides).
  A Base LoRA file's layers that hold w2 whole beside layers of products (`AdapterSpec.lokr_whole_w2`)
  get a whole w2 too, so they continue as the file was trained.
- `lokr_weight_decompose` (+ `lokr_dora_on_output`): DoRA on a LoKr layer. Its magnitude starts at
  the base weight's norms (per output row or per input column) and the layer computes
  magnitude * (W + s·kron(w1, w2)) / ||W + s·kron(w1, w2)||, the norm a constant for backprop
  (as OneTrainer and LyCORIS). The magnitude is the layer's `lora_magnitude_vector` (output axis)
  or `dora_scale` (input axis), the names and shapes plain DoRA layers use (lora_variants.py).
- `lokr_vec_trick`: a Linear layer without DoRA applies its two factors to the input one after
  the other (x as (..., in_m, in_n): y = w1 · X · w2ᵀ) instead of building kron(w1, w2), so the
  full (out, in) delta never exists: the same sum in less memory.

A layer whose two factors are both whole matrices (always with `lokr_full_matrix`, and wherever
`lokr_dim` is at least half a factor's larger side) trains at scale 1, not alpha / rank: OneTrainer
sets such a layer's alpha to its rank, and LyCORIS and ComfyUI apply its file at scale 1. peft
scales every layer by alpha / rank, so `install_lokr_switches` sets these layers' `scaling` to 1,
and `nominal_factor` converts their w1 to and from the peft form (every layer at alpha / rank)
that files are written from and read into.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Collection
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from .float_weight import float_weight
from .lora_layer_entries import is_unit_scale
from .lora_variants import ADAPTER_NAME, LOKR_MAGNITUDE, AdapterSpec, DecomposedMagnitude, adapter_parameters


@contextlib.contextmanager
def lokr_injection(spec: AdapterSpec, whole_w2: Collection[nn.Module] = ()):
    """While peft injects LoKr layers: w2 is created whole (and so is not a Tucker product) with
    `lokr_full_matrix`, and on the layers of `whole_w2` (base layers whose Base LoRA file holds w2
    whole, `AdapterSpec.lokr_whole_w2`: peft would build a product at the file's rank). A whole w2
    is initialized as LyCORIS does one (w1 Kaiming, w2 zero)."""
    if not spec.lokr_full_matrix and not whole_w2:
        yield
        return
    from peft.tuners.lokr.layer import LoKrLayer

    original = LoKrLayer.create_adapter_parameters
    whole = {id(m) for m in whole_w2}

    def create(self, adapter_name, r, shape, use_w1, use_w2, use_effective_conv2d):
        if spec.lokr_full_matrix or id(self.get_base_layer()) in whole:
            use_w2, use_effective_conv2d = True, False
        original(self, adapter_name, r, shape, use_w1, use_w2, use_effective_conv2d)

    LoKrLayer.create_adapter_parameters = create
    try:
        yield
    finally:
        LoKrLayer.create_adapter_parameters = original


def lokr_factors(layer: nn.Module, adapter_name: str = ADAPTER_NAME) -> tuple[torch.Tensor, torch.Tensor]:
    """(w1, w2) of a LoKr layer, each whole or rebuilt from its product (w2 also from its Tucker core)."""
    from peft.tuners.lokr.layer import make_weight_cp

    if adapter_name in layer.lokr_w1:
        w1 = layer.lokr_w1[adapter_name]
    else:
        w1 = layer.lokr_w1_a[adapter_name] @ layer.lokr_w1_b[adapter_name]
    if adapter_name in layer.lokr_w2:
        w2 = layer.lokr_w2[adapter_name]
    elif adapter_name in layer.lokr_t2:
        w2 = make_weight_cp(layer.lokr_t2[adapter_name], layer.lokr_w2_a[adapter_name], layer.lokr_w2_b[adapter_name])
    else:
        w2 = layer.lokr_w2_a[adapter_name] @ layer.lokr_w2_b[adapter_name]
    return w1, w2


def vec_trick_delta(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: float) -> torch.Tensor:
    """x @ (scale · kron(w1, w2))ᵀ without the kron: w1 (out_l, in_m), w2 (out_k, in_n), x (..., in_m·in_n)
    -> (..., out_l·out_k), the row and column order of torch.kron (peft's make_kron, LyCORIS)."""
    lead = x.shape[:-1]
    dtype = torch.promote_types(x.dtype, w1.dtype)
    grid = x.to(dtype).reshape(*lead, w1.shape[1], w2.shape[1])
    out = torch.einsum("...mn,lm,kn->...lk", grid, w1.to(dtype), w2.to(dtype))
    return out.reshape(*lead, w1.shape[0] * w2.shape[0]) * scale


def _adapter_on(layer: nn.Module) -> bool:
    return not layer.disable_adapters and not layer.merged and ADAPTER_NAME in layer.active_adapters


def _vec_trick_forward(self: nn.Module, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    if not _adapter_on(self):
        return type(self).forward(self, x, *args, **kwargs)
    w1, w2 = lokr_factors(self)
    result = self.get_base_layer()(x, *args, **kwargs)
    return (result + vec_trick_delta(x, w1, w2, self.scaling[ADAPTER_NAME])).to(x.dtype)


def decomposed_weight(layer: nn.Module) -> torch.Tensor:
    """The DoRA-LoKr layer's weight (float32): magnitude * (W + delta) / ||W + delta||, norm detached."""
    magnitude = getattr(layer, LOKR_MAGNITUDE)[ADAPTER_NAME]
    weight = float_weight(layer.get_base_layer())  # a quantized base's real weights
    merged = weight + layer.get_delta_weight(ADAPTER_NAME).float().reshape(weight.shape)
    factor = magnitude.factor(merged)
    view = (-1, *[1] * (weight.dim() - 1)) if magnitude.output_axis else (1, -1, *[1] * (weight.dim() - 2))
    return merged * factor.reshape(view)


def _decomposed_forward(self: nn.Module, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    if not _adapter_on(self):
        return type(self).forward(self, x, *args, **kwargs)
    base = self.get_base_layer()
    weight = decomposed_weight(self).to(x.dtype)
    bias = base.bias.to(x.dtype) if base.bias is not None else None
    if isinstance(base, nn.Linear):
        return F.linear(x, weight, bias)
    return base._conv_forward(x, weight, bias)  # Conv1d / Conv2d: the base's stride, padding and padding mode


def is_whole_pair(layer: nn.Module) -> bool:
    """A LoKr layer whose w1 and w2 are both whole matrices (`is_unit_scale` of its parameters)."""
    return is_unit_scale(adapter_parameters(layer))


def nominal_factor(layer: nn.Module) -> float:
    """What a layer's live w1 is multiplied by to give its peft form (scale alpha / rank): 1 but
    for a whole-pair LoKr layer, which trains at scale 1 (its w1 live = peft form · alpha / rank)."""
    if not is_whole_pair(layer):
        return 1.0
    nominal = float(layer.alpha[ADAPTER_NAME]) / int(layer.r[ADAPTER_NAME])
    return float(layer.scaling[ADAPTER_NAME]) / nominal


def install_lokr_switches(module: nn.Module, spec: AdapterSpec) -> None:
    """Scale 1 on whole-pair LoKr layers, and DoRA or the vec trick on every LoKr layer of
    `module`, as `spec` asks."""
    from peft.tuners.lokr.layer import LoKrLayer

    for layer in module.modules():
        if not isinstance(layer, LoKrLayer) or ADAPTER_NAME not in layer._available_adapters:
            continue
        if is_whole_pair(layer):
            layer.scaling[ADAPTER_NAME] = 1.0  # as OneTrainer (alpha = rank) and every reader of the file
        base = layer.get_base_layer()
        if spec.lokr_decompose:
            if getattr(base, "groups", 1) != 1:
                raise ValueError("lokr_weight_decompose: DoRA on grouped convolutions is not supported; turn it off")
            device = lokr_factors(layer)[0].device
            magnitude = DecomposedMagnitude(float_weight(base), output_axis=spec.lokr_dora_output, epsilon=True,
                                            dtype=torch.float32).to(device)
            setattr(layer, LOKR_MAGNITUDE, nn.ModuleDict({ADAPTER_NAME: magnitude}))
            layer.forward = types.MethodType(_decomposed_forward, layer)
        elif spec.lokr_vec_trick and isinstance(base, nn.Linear):
            layer.forward = types.MethodType(_vec_trick_forward, layer)

