"""Weight data types of 8 bits and less for frozen model parts (a part's `weight_dtype`).

FLOAT_8, INT_8 and NFLOAT_4 quantize the Linear layers of the part (in the denoiser those
`quantization.layer_filter` names, every one when it is blank); the other layers
(convolutions, norms, embeddings) stay in the train data type on a GPU, float32 on the CPU.
They work on any device: the point is memory, and the weights are expanded to the compute type
layer by layer in the forward pass.

- FLOAT_8: weights stored as float8 (e4m3) with one scale per output row; built in, no extra
  package.
- INT_8: bitsandbytes LLM.int8 linear layers.
- NFLOAT_4: bitsandbytes 4-bit NormalFloat (QLoRA) linear layers.

Only frozen weights can be stored this way: LoRA trains adapters on top of them (peft handles the
bitsandbytes layers natively), but a part trained in full must use FLOAT_32, FLOAT_16 or BFLOAT_16.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..config.enums import DataType
from .lora import parse_layer_filter

QUANTIZED = (DataType.FLOAT_8, DataType.INT_8, DataType.NFLOAT_4)
FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)


class LinearFp8(nn.Linear):
    """A Linear layer whose weight is float8 with a float32 scale per output row."""

    weight_scale: torch.Tensor

    @classmethod
    def convert(cls, layer: nn.Linear) -> LinearFp8:
        with torch.no_grad():
            w = layer.weight.detach().float()
            scale = (w.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
            layer.weight = nn.Parameter((w / scale).to(FP8), requires_grad=False)
        layer.__class__ = cls
        layer.register_buffer("weight_scale", scale)
        return layer

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return (self.weight.to(torch.float32) * self.weight_scale).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        autocast = x.device.type != "meta" and torch.is_autocast_enabled(x.device.type)  # meta: the planner's probe
        dtype = torch.get_autocast_dtype(x.device.type) if autocast else x.dtype
        bias = self.bias.to(dtype) if self.bias is not None else None
        return F.linear(x.to(dtype), self.dequantized_weight(dtype), bias)


def _bnb_linear(layer: nn.Linear, data_type: DataType, compute_dtype: torch.dtype) -> nn.Module:
    import bitsandbytes as bnb

    meta = layer.weight.is_meta  # a model built on the meta device (memory_meta.py) stays there
    host = (lambda t: t) if meta else (lambda t: t.cpu())
    weight = host(layer.weight.detach().float())
    with torch.device("meta") if meta else contextlib.nullcontext():  # no full-size CPU weight made and dropped
        if data_type == DataType.NFLOAT_4:
            new = bnb.nn.Linear4bit(layer.in_features, layer.out_features, bias=layer.bias is not None, compute_dtype=compute_dtype, quant_type="nf4")
            new.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4")
            # bitsandbytes repacks a 4-bit weight for its CPU kernel on the first eval-mode call without
            # gradients (a sample during training); the repacked layer then fails in training, and the
            # repacking needs input widths that are multiples of 64. Keep the one layout that trains.
            new.support_avx512bf16_for_cpu = False
        else:
            new = bnb.nn.Linear8bitLt(layer.in_features, layer.out_features, bias=layer.bias is not None, has_fp16_weights=False, threshold=0.0)
            new.weight = bnb.nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)
    if layer.bias is not None:
        new.bias = nn.Parameter(host(layer.bias.detach().to(compute_dtype)), requires_grad=False)
    return new


def quantization_filter(config: Any) -> Callable[[str], bool] | None:
    """Which Linear layers a quantized part quantizes, as OneTrainer's `quantization.layer_filter`
    says: comma-separated parts of module names (regular expressions with `layer_filter_regex`);
    blank = every Linear layer. (OneTrainer's `layer_filter_preset` is the page's name for the
    filter it fills in, e.g. "blocks" -> "transformer_block"; the filter is what decides.)"""
    q = config.quantization
    entries = parse_layer_filter(q.layer_filter or "", q.layer_filter_regex)
    if not entries:
        return None
    if q.layer_filter_regex:
        patterns = [re.compile(e) for e in entries]
        return lambda name: any(p.search(name) for p in patterns)
    return lambda name: any(e in name for e in entries)


def quantize_linear_layers(module: nn.Module, data_type: DataType, device: torch.device, compute_dtype: torch.dtype, part: str,
                           include: Callable[[str], bool] | None = None) -> int:
    """Quantize the Linear layers of `module` in place (those `include(name)` accepts; all when
    None) and move it to `device`; returns how many.
    ValueError (naming `part`) if the type needs bitsandbytes and it cannot be used, or if the
    filter matches no layer of the part."""
    data_type = DataType(data_type)
    if data_type not in QUANTIZED:
        raise ValueError(f"{part}.weight_dtype: {data_type.value} is not a quantized type")
    if data_type != DataType.FLOAT_8:
        try:
            import bitsandbytes  # noqa: F401
        except Exception as exc:
            raise ValueError(
                f"{part}.weight_dtype: {data_type.value} needs the bitsandbytes package, which could not be loaded ({exc}); "
                "install bitsandbytes or use FLOAT_8"
            ) from None
    # (layers a family keeps in its compute dtype are plain-Linear subclasses, skipped here: Z-Image's embedders)
    # the layers the model keeps in float32 stay as they are: T5 casts its feed-forward's input to
    # the `wo` weight's type (float8 or bitsandbytes' packed bytes would turn the activations to garbage)
    keep = set(getattr(module, "_keep_in_fp32_modules", None) or ())
    targets = [(name, child) for name, child in module.named_modules()
               if type(child) is nn.Linear and name.rpartition(".")[2] not in keep]
    if include is not None:
        targets = [(name, child) for name, child in targets if include(name)]
        if not targets:
            raise ValueError(f"quantization.layer_filter: matches no layer of {part}; check the names, or leave it blank "
                             "to quantize every Linear layer")
    for name, layer in targets:
        if data_type == DataType.FLOAT_8:
            LinearFp8.convert(layer)
            continue
        parent_name, _, child_name = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, child_name, _bnb_linear(layer, data_type, compute_dtype))
    module.to(device)  # bitsandbytes quantizes when its weights are moved
    return len(targets)
