"""A shorter forward for plain LoRA layers while they train.

peft's LoRA `Linear` and `Conv2d` layers compute `base(x) + lora_B(lora_A(dropout(x))) * scaling`,
and check their arguments, loop over the active adapters and call three submodules on every
call. A training step of the default `full` preset makes 282 such calls forward (SD 1.5's UNet
layout has 282 linear and convolution layers) and their backward passes. This forward computes the same
sum from the same parameters with the sum and the scaling in one operation
(`torch.add(base, lora, alpha=scaling)`), which makes one autograd node fewer per layer too:
4-5 ms of a 130 ms step on the benchmark model (docs/PERFORMANCE.md §10c).

It is installed only on layers where it computes exactly what peft would: one adapter (ours),
plain LoRA (no DoRA or other variant), no dropout. Anything else at call time (adapters turned
off or merged, another adapter active, extra arguments) goes to peft's own forward, so sampling,
merging and scaling through peft keep working. Parameters are read when the layer runs, so the
memory planner's meta stand-ins and a changed `scaling` are seen.

During a training step (`step_casts`), the LoRA weights are cast to the step's autocast type once,
all together, with each down weight multiplied by its layer's scaling: autocast would otherwise
cast each of them on each call, and their gradients back, four copies per layer (about 1,100
kernel launches a step for SD 1.5's 282 layers); and with the scaling in the down weight the up
product and the sum are one `addmm`. The layers read those copies while the step lasts; the
gradients come back to the float32 weights through one operation too (`_CastOnce`). A float32
input (after autocast's float32 norms) is cast once for the base and the adapter products
(`_autocast_input`), where autocast would cast it for each.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch._utils import _flatten_dense_tensors as flatten_dense_tensors
from torch._utils import _unflatten_dense_tensors as unflatten_dense_tensors

from ..models.common import autocast_dtype
from .lora_variants import ADAPTER_NAME
from .meta_autocast import emulated_dtype

_ACTIVE = [ADAPTER_NAME]
# id(layer) -> (down weight times scaling, up weight), in the step's autocast type (`step_casts`)
_STEP: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _plain(layer: nn.Module) -> bool:
    """One adapter, ours, vanilla LoRA without dropout, on a layer of exactly peft's class."""
    from peft.tuners.lora import layer as lora_layer  # noqa: PLC0415

    if type(layer) not in (lora_layer.Linear, lora_layer.Conv2d):
        return False
    if list(layer.lora_A.keys()) != _ACTIVE or ADAPTER_NAME in layer.lora_variant:
        return False
    if getattr(layer, "fan_in_fan_out", False) or getattr(layer, "lora_bias", {}).get(ADAPTER_NAME, False):
        return False
    return isinstance(layer.lora_dropout[ADAPTER_NAME], nn.Identity)


def _general(layer: nn.Module, args: tuple, kwargs: dict) -> bool:
    """peft's own forward: other arguments, adapters off or merged, another adapter, or kohya's rank /
    module dropout (lora_dropouts.py: hooks on the submodules peft calls)."""
    return (bool(args or kwargs) or layer.disable_adapters or layer.merged or layer.active_adapters != _ACTIVE
            or getattr(layer, "ot_dropouts", False))


def _sum(result: torch.Tensor, lora: torch.Tensor, scaling: float) -> torch.Tensor:
    if lora.dtype == result.dtype:
        return torch.add(result, lora, alpha=scaling)
    return (result + lora * scaling).to(result.dtype)  # peft's order, then its cast back


def _autocast_type(x: torch.Tensor) -> torch.dtype | None:
    """The type autocast computes `x`'s products in, if on; for meta tensors (the memory planner's
    probe), the type its emulation of CUDA autocast casts to (meta_autocast.py)."""
    return emulated_dtype() if x.is_meta else autocast_dtype(x.device.type)


def _cast_input(self: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """peft's cast of the input to the adapter's type, left out under autocast: the product casts
    its inputs to the autocast type anyway, so the cast there (and its backward) only adds two
    copies per layer (on a GPU, SD 1.5's UNet at batch 1 launches about 5,000 kernels a step and
    waits on their launching, not on the matrix products; docs/PERFORMANCE.md §17)."""
    if x.dtype == dtype or not self.cast_input_dtype_enabled or _autocast_type(x) is not None:
        return x
    return x.to(dtype)


def _step_weights(self: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """This step's cast weights (`step_casts`), where the call computes in their type (not in a
    part run with autocast off or in another type, fp16_fallback.py)."""
    weights = _STEP.get(id(self)) if _STEP else None
    if weights is None or weights[0].dtype != (_autocast_type(x) or x.dtype):
        return None
    return weights


def _autocast_input(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The input cast to the autocast type once, for the base product and the adapter's both:
    autocast would cast it for each of them (two copies, and two casts of its gradient back); a
    float32 input is what follows every float32 norm (a transformer block's attention and
    feed-forward, a ResNet's convolutions). Only before a plain Linear / Conv2d, whose product
    autocast casts the same way; a quantized base layer takes its input as it comes."""
    dtype = _autocast_type(x)
    if dtype is None or x.dtype == dtype or not x.is_floating_point() or type(self.base_layer) not in (nn.Linear, nn.Conv2d):
        return x
    return x.to(dtype)


def _linear_forward(self: nn.Module, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if _general(self, args, kwargs):
        return type(self).forward(self, x, *args, **kwargs)
    x = _autocast_input(self, x)
    cast = _step_weights(self, x)
    if cast is not None:  # the scaling is in the down weight: the up product and the sum in one addmm
        base = self.base_layer
        if _one_node(base, x, cast[0]):
            return _LoraLinear.apply(x, base.weight, base.bias, *cast)
        result = base(x)
        down = F.linear(x, cast[0])
        return torch.addmm(result.reshape(-1, result.shape[-1]), down.reshape(-1, down.shape[-1]), cast[1].t()).view(result.shape)
    result = self.base_layer(x)
    a = self.lora_A[ADAPTER_NAME].weight
    x = _cast_input(self, x, a.dtype)
    return _sum(result, F.linear(F.linear(x, a), self.lora_B[ADAPTER_NAME].weight), self.scaling[ADAPTER_NAME])


def _one_node(base: nn.Module, x: torch.Tensor, down: torch.Tensor) -> bool:
    """`_LoraLinear` computes the layer: a plain frozen Linear whose weights, input and cast LoRA
    weights are of one type (its backward runs without autocast, so nothing may need casting)."""
    if type(base) is not nn.Linear or base.weight.requires_grad or base.weight.dtype != x.dtype or down.dtype != x.dtype:
        return False
    return base.bias is None or (not base.bias.requires_grad and base.bias.dtype == x.dtype)


class _LoraLinear(torch.autograd.Function):
    """A LoRA Linear in a training step, as one autograd node: `x W^T + b + (x D^T) U^T` with the
    step's cast weights (`step_casts`: D already times the scaling). Autograd would make a node
    for each product and view (about eight a layer) and sum the input's two gradients in an
    operation of its own; here the backward is four products, the input's gradient one `mm` and
    one `addmm`. A small-batch step on a GPU waits on the CPU that launches its kernels
    (docs/PERFORMANCE.md §17), so each node and operation fewer is time. It keeps the tensors
    autograd keeps: the input, the down product and the weights."""

    @staticmethod
    def forward(ctx, x, weight, bias, down, up):
        flat = x.reshape(-1, x.shape[-1])
        low = flat @ down.t()
        base = flat @ weight.t() if bias is None else torch.addmm(bias, flat, weight.t())
        ctx.save_for_backward(flat, low, weight, down, up)
        ctx.input_shape = x.shape
        return torch.addmm(base, low, up.t()).view(*x.shape[:-1], up.shape[0])

    @staticmethod
    def backward(ctx, grad):
        flat, low, weight, down, up = ctx.saved_tensors
        grad = grad.reshape(-1, grad.shape[-1])
        grad_low = grad @ up
        grad_x = torch.addmm(grad @ weight, grad_low, down).view(ctx.input_shape) if ctx.needs_input_grad[0] else None
        grad_down = grad_low.t() @ flat if ctx.needs_input_grad[3] else None
        grad_up = grad.t() @ low if ctx.needs_input_grad[4] else None
        return grad_x, None, None, grad_down, grad_up


def _conv_forward(self: nn.Module, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if _general(self, args, kwargs):
        return type(self).forward(self, x, *args, **kwargs)
    x = _autocast_input(self, x)
    result = self.base_layer(x)
    down, up = self.lora_A[ADAPTER_NAME], self.lora_B[ADAPTER_NAME]
    cast = _step_weights(self, x)
    if cast is not None:
        return torch.add(result, up._conv_forward(down._conv_forward(x, cast[0], down.bias), cast[1], up.bias))
    x = _cast_input(self, x, down.weight.dtype)
    lora = up._conv_forward(down._conv_forward(x, down.weight, down.bias), up.weight, up.bias)
    return _sum(result, lora, self.scaling[ADAPTER_NAME])


def install_lora_forward(layers: list[nn.Module]) -> int:
    """The shorter forward on each layer of `layers` it fits (see the module's notes). Returns
    how many got it."""
    from peft.tuners.lora import layer as lora_layer  # noqa: PLC0415

    count = 0
    for layer in layers:
        if not _plain(layer):
            continue
        forward = _linear_forward if type(layer) is lora_layer.Linear else _conv_forward
        layer.forward = types.MethodType(forward, layer)  # an instance attribute: nn.Module.__call__ finds it
        count += 1
    return count


class _CastOnce(torch.autograd.Function):
    """Float32 weights in, their copies in `dtype` out, the down weights multiplied by their
    layer's scaling, in a few kernels for all of them (a concatenation, a multiplication per
    distinct scaling on its stretch of the weights, one cast); the gradients back the same way.
    `scaled`: (first, end, scaling) stretches of `weights` by index. Gradients that did not come
    (a layer not run this step) stay None, as they would without it."""

    @staticmethod
    def forward(ctx, dtype: torch.dtype, scaled: list[tuple[int, int, float]], *weights: torch.Tensor):
        ctx.set_materialize_grads(False)
        ctx.scaled, ctx.sizes = scaled, [w.numel() for w in weights]
        return _cast_all(dtype, scaled, ctx.sizes, weights)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None):
        came = [i for i, g in enumerate(grads) if g is not None]
        out: list[torch.Tensor | None] = [None] * len(grads)
        if not came:
            return None, None, *out
        given = [grads[i] for i in came]
        flat = flatten_dense_tensors(given).float()
        if len(came) == len(grads):
            _scale(flat, ctx.sizes, ctx.scaled)
        else:  # some layers did not run: the stretches by the gradients that came
            parts = dict(zip(came, flat.split([ctx.sizes[i] for i in came]), strict=True))
            for first, end, scaling in ctx.scaled:
                if scaling != 1.0 and (some := [parts[i] for i in range(first, end) if i in parts]):
                    torch._foreach_mul_(some, scaling)
        for i, part in zip(came, unflatten_dense_tensors(flat, given), strict=True):
            out[i] = part
        return None, None, *out


def _cast_all(dtype: torch.dtype, scaled: list[tuple[int, int, float]], sizes: list[int],
              weights: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """`weights` in `dtype`, the `scaled` stretches times their scaling: one concatenation (a loop in
    C++, where a view per weight in Python cost more than the kernels), a multiplication a scaling,
    one cast."""
    flat = flatten_dense_tensors(weights)
    _scale(flat, sizes, scaled)
    return tuple(unflatten_dense_tensors(flat.to(dtype), weights))


def _scale(flat: torch.Tensor, sizes: list[int], scaled: list[tuple[int, int, float]]) -> None:
    """Each stretch of `flat` (the weights of `sizes` one after the other) times its scaling."""
    for first, end, scaling in scaled:
        if scaling != 1.0 and end > first:
            start = sum(sizes[:first])
            flat[start:start + sum(sizes[first:end])].mul_(scaling)


def on_device(t: torch.Tensor | torch.device, device: torch.device) -> bool:
    """`t` (a tensor, or its device) is on `device`, where "cuda" (a trainer's device) means the current card: a weight there
    is on "cuda:0", which `!=` tells apart from "cuda" (on an H200 that left every step casting
    per layer)."""
    device, where = torch.device(device), t if isinstance(t, torch.device) else t.device
    return where.type == device.type and (device.index is None or where.index in (None, device.index))


def cast_once_layers(modules: list[nn.Module]) -> list[nn.Module]:
    """The layers of `modules` on the shorter forward, whose weights `step_casts` can cast."""
    return [m for module in modules for m in module.modules()
            if getattr(m.__dict__.get("forward"), "__func__", None) in (_linear_forward, _conv_forward)]


def _adapter_weights(layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """`layer.lora_A[ADAPTER_NAME].weight` and its `lora_B`'s, read from the modules' tables (a
    step reads them for every layer: nn.Module's attribute lookup cost more than the step's casts)."""
    modules = layer._modules
    return modules["lora_A"]._modules[ADAPTER_NAME]._parameters["weight"], modules["lora_B"]._modules[ADAPTER_NAME]._parameters["weight"]


def _cast_frozen(dtype: torch.dtype, scaled: list[tuple[int, int, float]], *weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`_CastOnce` for weights that do not train (a text encoder past its `stop_training_after`):
    the same copies, no autograd node."""
    with torch.no_grad():
        return _cast_all(dtype, scaled, [w.numel() for w in weights], weights)


def _cast_group(pairs: list[tuple[nn.Module, torch.Tensor, torch.Tensor]], dtype: torch.dtype, device: torch.device,
                cast: Callable[..., tuple[torch.Tensor, ...]]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """id(layer) -> its (down times scaling, up) weights in `dtype`, made by `cast` for all of `pairs`
    at once; nothing where the weights are not all float32 on `device` (layer offloading moves
    some to RAM)."""
    # the down weights, those of one scaling side by side, then the up weights
    pairs = sorted(pairs, key=lambda p: float(p[0].scaling[ADAPTER_NAME]))
    weights = [p[1] for p in pairs] + [p[2] for p in pairs]
    if not weights or any(t != torch.float32 or not on_device(d, device) for t, d in {(w.dtype, w.device) for w in weights}):
        return {}
    scaled: list[tuple[int, int, float]] = []
    for i, (layer, _, _) in enumerate(pairs):
        scaling = float(layer.scaling[ADAPTER_NAME])
        if scaled and scaled[-1][2] == scaling:
            scaled[-1] = (scaled[-1][0], i + 1, scaling)
        else:
            scaled.append((i, i + 1, scaling))
    out = cast(dtype, scaled, *weights)
    n = len(pairs)
    return {id(p[0]): (out[i], out[n + i]) for i, p in enumerate(pairs)}


@contextlib.contextmanager
def step_casts(layers: list[nn.Module], dtype: torch.dtype | None, device: torch.device) -> Iterator[None]:
    """While the block lasts (a training step's forward and backward), `layers` read their weights
    cast to `dtype` once: those that train through `_CastOnce` (their gradients come back through
    it), the frozen ones (a text encoder that stopped training while its captions are not cached)
    without autograd, where autocast would cast them at every call. Nothing is done without a
    `dtype`."""
    if dtype is not None:
        pairs = [(layer, *_adapter_weights(layer)) for layer in layers if not _general(layer, (), {})]
        _STEP.update(_cast_group([p for p in pairs if p[1].requires_grad and p[2].requires_grad], dtype, device, _CastOnce.apply))
        _STEP.update(_cast_group([p for p in pairs if not p[1].requires_grad and not p[2].requires_grad], dtype, device, _cast_frozen))
    try:
        yield
    finally:
        _STEP.clear()
