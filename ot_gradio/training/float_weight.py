"""A frozen layer's weight as real numbers, whatever it is stored in: what an adapter that computes
with the base weight itself (DoRA's norms) must read. FLOAT_8 / INT_W8A8 / FLOAT_W8A8 layers
(training/quantize.py) hold 8-bit codes with a scale per row, bitsandbytes' INT_8 / NFLOAT_4 hold
int8 codes or packed 4-bit bytes, GGUF layers hold quantized blocks: read raw, those are not the
weights (wrong numbers, or not even the weight's shape)."""

from __future__ import annotations

import torch
from torch import nn

from .svd_quant import low_rank_weight

PLAIN = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def is_stored_plain(layer: nn.Module) -> bool:
    """The layer's `weight` holds the weights themselves (a float type, not codes or bytes)."""
    weight = layer.weight
    return weight.dtype in PLAIN and type(weight).__name__ not in ("Params4bit", "Int8Params", "GGUFParameter")


def float_weight(layer: nn.Module, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`layer`'s weight in `dtype`, with its real values and shape: the layer's own tensor when it
    is stored plain (no copy when the type matches), else dequantized (a new tensor), with its
    SVDQuant low-rank part added back where it has one."""
    low_rank = low_rank_weight(layer)
    if low_rank is not None:
        return (_stored_weight(layer, torch.float32) + low_rank).to(dtype)
    return _stored_weight(layer, dtype)


def _stored_weight(layer: nn.Module, dtype: torch.dtype) -> torch.Tensor:
    if is_stored_plain(layer):
        return layer.weight.to(dtype)
    if hasattr(layer, "dequantized_weight"):  # ours: FLOAT_8, INT_W8A8, FLOAT_W8A8
        return layer.dequantized_weight(dtype)
    if type(layer.weight).__name__ == "GGUFParameter":
        from diffusers.quantizers.gguf.utils import dequantize_gguf_tensor

        return dequantize_gguf_tensor(layer.weight.detach()).to(dtype)
    weight = layer.weight
    if type(weight).__name__ == "Int8Params":  # bitsandbytes' INT_8: int8 codes, a scale per row over 127
        # (after its first forward the layer's state holds the scales and the weight's are cleared)
        scales = weight.SCB if getattr(weight, "SCB", None) is not None else layer.state.SCB
        return (weight.data.float() * (scales.float()[:, None] / 127.0)).to(dtype)
    if type(weight).__name__ == "Params4bit":  # NFLOAT_4: packed 4-bit codes and their quant state
        from bitsandbytes.functional import dequantize_4bit

        return dequantize_4bit(weight.data, weight.quant_state).to(dtype)
    raise TypeError(f"{type(layer).__name__}: its weight is stored as {weight.dtype}, which cannot be read as numbers here")


def input_dtype(layer: nn.Module, x: torch.Tensor) -> torch.dtype:
    """The type to hand `layer` its input in: its weight's when stored plain, else the input's own
    (a quantized layer computes in the activations' type; its stored type is codes)."""
    return layer.weight.dtype if is_stored_plain(layer) else x.dtype
