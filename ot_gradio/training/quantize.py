"""Weight data types of 8 bits and less for frozen model parts (a part's `weight_dtype`).

FLOAT_8, INT_8, NFLOAT_4, INT_W8A8 and FLOAT_W8A8 quantize the Linear layers of the part (in the
denoiser those `quantization.layer_filter` names, every one when it is blank); the other layers
(convolutions, norms, embeddings) stay in the train data type on a GPU, float32 on the CPU.

- FLOAT_8: weights stored as float8 (e4m3) with one scale per output row; built in, no extra
  package. The weights are expanded to the compute type layer by layer in the forward pass: the
  point is memory.
- INT_8: bitsandbytes LLM.int8 linear layers.
- NFLOAT_4: bitsandbytes 4-bit NormalFloat (QLoRA) linear layers.
- INT_W8A8 / FLOAT_W8A8 (OneTrainer's): the weights as int8 / float8 with one scale per output
  row (OneTrainer keeps one scale per tensor), and the matmuls in 8 bits too: each forward
  quantizes the activations per token (row) and multiplies the codes with `torch._int_mm` /
  `torch._scaled_mm`; the backward does the same with the gradient for the input's gradient (what
  a LoRA on top needs). Faster than the plain types where the device has 8-bit matmul units
  (NVIDIA: int8 on most recent cards, float8 from Ada / Hopper). Built in, no extra package. Where the
  device cannot run the kernel (`w8a8_kernel_problem`: a float8 matmul on an older card, MPS),
  for inputs of 16 rows or fewer, and on a GPU for layer widths the kernels refuse (not
  multiples of 8 for int8, 16 for float8), a layer computes as FLOAT_8 does, with its weight
  expanded. On the CPU torch runs both kernels, and the layers use them: int8 there is faster
  than the float matmul, float8 slower (emulated); the type is meant for GPUs.

With `quantization.svd_dtype` (SVDQuant, svd_quant.py) each of these layers keeps a frozen low-rank
part of its weight unquantized and quantizes only the rest.

Only frozen weights can be stored this way: LoRA trains adapters on top of them (peft handles the
bitsandbytes layers natively, ours are nn.Linear subclasses), but a part trained in full must use
FLOAT_32, FLOAT_16 or BFLOAT_16.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..config.enums import DataType
from ..models.common import autocast_dtype
from .device import QUANTIZED_TYPES
from .lora import parse_layer_filter
from .svd_quant import SvdSpec, attach_low_rank, split_low_rank

log = logging.getLogger(__name__)

QUANTIZED = QUANTIZED_TYPES
FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)
W8A8_CODES = {DataType.INT_W8A8: torch.int8, DataType.FLOAT_W8A8: FP8}  # the 8-bit type of weights and activations
CODE_MAX = {torch.int8: 127.0, FP8: FP8_MAX}
KERNEL_MIN_ROWS = 17  # fewer rows compute with the expanded weight (CUDA's int8 kernel needs more than 16)
BNB_TYPES = (DataType.INT_8, DataType.NFLOAT_4)


def quantize_rows(t: torch.Tensor, code: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`t` (rows, columns) as 8-bit codes of type `code` (int8 rounded to nearest, or float8 e4m3)
    with one float32 scale per row, (rows, 1): the row's largest magnitude maps to the code's."""
    t = t.float()
    limit = CODE_MAX[code]
    scale = (t.abs().amax(dim=1, keepdim=True) / limit).clamp(min=1e-12)
    scaled = (t / scale).clamp(-limit, limit)
    codes = scaled.round().to(torch.int8) if code == torch.int8 else scaled.to(code)
    return codes.contiguous(), scale


def mm_8bit(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (m, k) @ b (k, n) of 8-bit codes of one type, as float32: int8 summed exactly in int32
    (`torch._int_mm`), float8 by `torch._scaled_mm` (which wants `b` column-major)."""
    if a.dtype == torch.int8:
        return torch._int_mm(a, b).float()
    if b.stride(0) != 1:
        b = b.t().contiguous().t()
    one = torch.ones((), device=a.device)
    return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float32)


def kernel_takes(rows: torch.Tensor, code: torch.dtype, in_features: int, out_features: int) -> bool:
    """The 8-bit matmul of `code` takes these input rows (enough of them) and, on a GPU, this
    layer's widths (the kernels' layout rules: multiples of 8 for int8, 16 for float8)."""
    if rows.shape[0] < KERNEL_MIN_ROWS:
        return False
    if rows.device.type == "cpu":
        return True
    multiple = 8 if code == torch.int8 else 16
    return in_features % multiple == 0 and out_features % multiple == 0


class _W8A8Matmul(torch.autograd.Function):
    """x @ W.T with x quantized per row and W the 8-bit codes with a scale per output row; the
    input's gradient in 8 bits the same way (the weight's scale folded into the gradient, whose
    rows are then quantized). No gradient for the weight: it is frozen."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        ctx.save_for_backward(weight, weight_scale)
        codes, x_scale = quantize_rows(x, weight.dtype)
        return mm_8bit(codes, weight.t()).mul_(x_scale).mul_(weight_scale.t()).to(out_dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:
        weight, weight_scale = ctx.saved_tensors
        codes, g_scale = quantize_rows(grad.float() * weight_scale.t(), weight.dtype)
        return mm_8bit(codes, weight).mul_(g_scale).to(grad.dtype), None, None, None


class RowScaledLinear(nn.Linear):
    """A Linear layer whose weight is 8-bit codes with a float32 scale per output row; it
    computes with the weight expanded to the input's type (the autocast type under autocast)."""

    weight_scale: torch.Tensor

    @classmethod
    def convert(cls, layer: nn.Linear, code: torch.dtype = FP8) -> RowScaledLinear:
        with torch.no_grad():
            codes, scale = quantize_rows(layer.weight.detach(), code)
            layer.weight = nn.Parameter(codes, requires_grad=False)
        layer.__class__ = cls
        layer.register_buffer("weight_scale", scale)
        return layer

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return (self.weight.to(torch.float32) * self.weight_scale).to(dtype)

    def matmul_dtype(self, x: torch.Tensor) -> torch.dtype:  # (not `compute_dtype`: peft reads that name as a dtype)
        return autocast_dtype(x.device.type) or x.dtype  # (none on meta: the planner's probe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.matmul_dtype(x)
        bias = self.bias.to(dtype) if self.bias is not None else None
        return F.linear(x.to(dtype), self.dequantized_weight(dtype), bias)


class LinearFp8(RowScaledLinear):
    """FLOAT_8: float8 (e4m3) weight codes, matmuls in the compute type."""


class LinearW8A8(RowScaledLinear):
    """INT_W8A8 / FLOAT_W8A8: int8 or float8 weight codes and 8-bit matmuls (see the module's
    docstring). `kernel` is off where the device cannot run the 8-bit matmul: then, as for small
    inputs, the layer computes as LinearFp8 does."""

    kernel: bool

    @classmethod
    def convert(cls, layer: nn.Linear, code: torch.dtype = FP8, kernel: bool = True) -> LinearW8A8:
        new = super().convert(layer, code)
        new.kernel = kernel
        return new

    def _kernel_takes(self, x: torch.Tensor) -> bool:
        return self.kernel and kernel_takes(x, self.weight.dtype, self.in_features, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.requires_grad:
            raise ValueError("INT_W8A8 / FLOAT_W8A8 weights cannot be trained; train a LoRA on them, or use FLOAT_32, "
                             "FLOAT_16 or BFLOAT_16 for a part trained in full")
        rows = x.reshape(-1, x.shape[-1])
        if not self._kernel_takes(rows):
            return super().forward(x)
        dtype = self.matmul_dtype(x)
        try:
            y = _W8A8Matmul.apply(rows, self.weight, self.weight_scale, dtype)
        except torch.OutOfMemoryError:
            raise
        except RuntimeError as exc:  # a kernel the probe let through refused this layer: the expanded weight from now on
            self.kernel = False
            _say_fallback_once(self.weight.dtype, x.device, _first_line(exc))
            return super().forward(x)
        if self.bias is not None:
            y = y + self.bias.to(dtype)
        return y.reshape(*x.shape[:-1], self.out_features)


GGUF_A8_CODES = {DataType.GGUF_A8_INT: torch.int8, DataType.GGUF_A8_FLOAT: FP8}


@functools.cache
def _gguf_a8_linear() -> type:
    """diffusers' GGUF Linear layer whose matmuls run in 8 bits (GGUF_A8_INT / GGUF_A8_FLOAT, as
    OneTrainer's): each forward dequantizes the .gguf weight, requantizes it to 8-bit codes with a
    scale per output row and multiplies them with the activations quantized per token, as the
    W8A8 layers do (the backward too). Where the 8-bit matmul does not apply (few rows, widths the
    GPU kernel refuses, a device without it) it computes as GGUF does."""
    from diffusers.quantizers.gguf.utils import GGUFLinear, dequantize_gguf_tensor

    class GGUFLinearA8(GGUFLinear):
        code: torch.dtype
        kernel: bool

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            rows = x.reshape(-1, x.shape[-1])
            if not (self.kernel and kernel_takes(rows, self.code, self.in_features, self.out_features)):
                return super().forward(x)
            dtype = self.compute_dtype or x.dtype
            codes, scale = quantize_rows(dequantize_gguf_tensor(self.weight.detach()), self.code)
            y = _W8A8Matmul.apply(rows, codes, scale, dtype)
            if self.bias is not None:
                y = y + self.bias.to(dtype)
            return y.reshape(*x.shape[:-1], self.out_features)

    return GGUFLinearA8


def gguf_a8_layers(module: nn.Module, data_type: DataType, device: torch.device) -> tuple[int, str | None]:
    """Turn the GGUF Linear layers of `module` holding quantized .gguf weights (not its F32 / F16 /
    BF16 ones, which have nothing to requantize) into GGUF_A8 layers of `data_type`; returns how many
    and, where `device` cannot run the 8-bit matmul, the warning for the run (they then compute as GGUF)."""
    from diffusers.quantizers.gguf.utils import UNQUANTIZED_TYPES, GGUFLinear

    code = GGUF_A8_CODES[DataType(data_type)]
    why = None if device.type == "meta" else _probe(code, device)
    layers = [m for m in module.modules() if type(m) is GGUFLinear and m.weight.quant_type not in UNQUANTIZED_TYPES]
    for layer in layers:
        layer.__class__ = _gguf_a8_linear()
        layer.code, layer.kernel = code, why is None
    return len(layers), None if why is None else fallback_message(code, device, why, DataType(data_type).value, "GGUF")


_FALLBACKS_SAID: set[torch.dtype] = set()


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _say_fallback_once(code: torch.dtype, device: torch.device, why: str) -> None:
    if code not in _FALLBACKS_SAID:
        _FALLBACKS_SAID.add(code)
        log.warning("%s", fallback_message(code, device, why))


def fallback_message(code: torch.dtype, device: torch.device, why: str, name: str = "", plain: str = "") -> str:
    """The warning for a device without the 8-bit matmul of `code`: `name`, the weight type
    (INT_W8A8 / FLOAT_W8A8 by default), then computes as `plain` does (INT_8 / FLOAT_8)."""
    name = name or ("INT_W8A8" if code == torch.int8 else "FLOAT_W8A8")
    plain = plain or ("INT_8" if code == torch.int8 else "FLOAT_8")
    return (f"{name}: {device} cannot run its 8-bit matmul ({why}); those layers compute with the weight expanded "
            f"to the train data type instead, as {plain} does (the same memory, no 8-bit speed-up)")


@functools.cache
def _probe(code: torch.dtype, device: torch.device) -> str | None:
    try:
        a, _ = quantize_rows(torch.ones(32, 32, device=device), code)
        mm_8bit(a, a.t())  # the forward's layout
        mm_8bit(a, a)  # the backward's
    except Exception as exc:  # noqa: BLE001 (any refusal: the layers then compute the plain way)
        return _first_line(exc)
    return None


def w8a8_kernel_problem(data_type: DataType, device: torch.device) -> str | None:
    """Why `device` cannot run the 8-bit matmul of `data_type` (INT_W8A8 / FLOAT_W8A8), as the
    warning for the run's log; None when it can. Tried once per device and type, with a product
    in each layout the layer uses (a model planned on the meta device is taken to run it)."""
    code = W8A8_CODES[DataType(data_type)]
    if device.type == "meta":
        return None
    why = _probe(code, device)
    return None if why is None else fallback_message(code, device, why)


def _bnb_linear(layer: nn.Linear, data_type: DataType, compute_dtype: torch.dtype, device: torch.device | None = None) -> nn.Module:
    """bitsandbytes' layer for `layer`, its weight quantized on `device` right away (bitsandbytes
    quantizes a weight when it is moved): one float32 copy of one layer at a time. Left for the
    part's move, the float32 copies of all its layers waited in RAM together (a 2 GB bfloat16 Flux
    transformer of two blocks took 4.5 GB more at the peak; the full Flux.1 transformer and T5
    would take 48 and 19 GB more). Without `device` (or on meta) the weight waits unquantized."""
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
    if device is not None and not meta and torch.device(device).type != "meta":
        new.weight = new.weight.to(device)  # quantized here (Params4bit / Int8Params quantize when moved)
    new.forward = types.MethodType(_bnb_forward, new)  # an instance attribute: nn.Module.__call__ finds it
    return new


def _bnb_forward(self: nn.Module, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """bitsandbytes' layer as autocast runs a linear layer: the input in the autocast type, so the
    output is too. bitsandbytes computes in its compute type and returns its input's type, which
    after autocast's float32 norms kept much of a Flux NF4 step in float32 (its activations 1.5x
    BFLOAT_16's on an H200, docs/PERFORMANCE.md section 17). The product is the same: bitsandbytes
    casts the input to its compute type first either way."""
    dtype = autocast_dtype(x.device.type)
    if dtype is not None and x.is_floating_point():
        x = x.to(dtype)
    return type(self).forward(self, x, *args, **kwargs)


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


def _dtype_source(module: nn.Module) -> nn.Module | None:
    """The layer whose weight diffusers (and transformers) read as the model's `dtype` (its first
    floating parameter, past `_keep_in_fp32_modules`): the pipelines cast their inputs to that type, so
    float8 codes there would make every input float8 (Ideogram 4's first layer is a Linear). That
    layer stays in the compute type."""
    if not isinstance(getattr(type(module), "dtype", None), property):  # not a diffusers / transformers model
        return None
    keep = getattr(module, "_keep_in_fp32_modules", None) or ()
    for name, param in module.named_parameters():
        if param.is_floating_point() and not any(k in name for k in keep):
            owner = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
            return owner if type(owner) is nn.Linear else None
    return None


def quantize_linear_layers(module: nn.Module, data_type: DataType, device: torch.device, compute_dtype: torch.dtype, part: str,
                           include: Callable[[str], bool] | None = None, svd: SvdSpec | None = None) -> int:
    """Quantize the Linear layers of `module` in place (those `include(name)` accepts; all when
    None) and move it to `device`; returns how many. With `svd` each keeps a low-rank part of its
    weight unquantized (SVDQuant, svd_quant.py).
    ValueError (naming `part`) if the type needs bitsandbytes and it cannot be used, or if the
    filter matches no layer of the part."""
    data_type = DataType(data_type)
    if data_type not in QUANTIZED:
        raise ValueError(f"{part}.weight_dtype: {data_type.value} is not a quantized type")
    if data_type in BNB_TYPES:
        try:
            import bitsandbytes  # noqa: F401
        except Exception as exc:
            raise ValueError(
                f"{part}.weight_dtype: {data_type.value} needs the bitsandbytes package, which could not be loaded ({exc}); "
                "install bitsandbytes or use FLOAT_8 / FLOAT_W8A8"
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
    if data_type in (DataType.FLOAT_8, DataType.FLOAT_W8A8):
        first = _dtype_source(module)
        targets = [(name, child) for name, child in targets if child is not first]
    kernel = data_type in W8A8_CODES and w8a8_kernel_problem(data_type, device) is None
    for index, (name, layer) in enumerate(targets):
        targets[index] = None  # (the replaced layer's weight goes as soon as it is replaced)
        factors = split_low_rank(layer, svd, device) if svd is not None else None
        if data_type == DataType.FLOAT_8:
            new = LinearFp8.convert(layer)
        elif data_type in W8A8_CODES:
            new = LinearW8A8.convert(layer, W8A8_CODES[data_type], kernel)
        else:
            parent_name, _, child_name = name.rpartition(".")
            new = _bnb_linear(layer, data_type, compute_dtype, device)
            setattr(module.get_submodule(parent_name) if parent_name else module, child_name, new)
        del layer
        if factors is not None:
            attach_low_rank(new, *factors)
    module.to(device)  # the rest of the part (bitsandbytes' layers are on `device` already)
    return len(targets)


def rest_in(module: nn.Module, dtype: torch.dtype) -> None:
    """The floating weights of `module` outside its quantized layers in `dtype`, the type those
    layers compute in, as OneTrainer loads a quantized part's other weights in it (a module
    quantized after it loaded in another part's type: Ideogram 4's unconditional transformer,
    loaded in the transformer's BFLOAT_16, NFLOAT_4 in a FLOAT_32 run, normed in bfloat16 what
    its quantized layers computed in float32); what the module keeps in float32 stays."""
    from ..models.common import kept_in_float32  # noqa: PLC0415

    kept = kept_in_float32(module)
    for name, layer in module.named_modules():
        if isinstance(layer, RowScaledLinear) or type(layer).__module__.startswith("bitsandbytes"):
            continue  # (its scales stay float32; its bias is in dtype already)
        for key, param in layer.named_parameters(recurse=False):
            if param.is_floating_point() and param.dtype not in (FP8, torch.float8_e5m2) and param.dtype != dtype \
                    and not kept(f"{name}.{key}" if name else key):
                param.data = param.data.to(dtype)
