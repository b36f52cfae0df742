"""The memory planner's probe: one training step (`DiffusionStep.loss` and the backward pass) at
the configured batch size and resolution, with the trained parts' weights and the inputs on the
meta device, so nothing is computed or allocated, while a dispatch mode (`LiveBytes`) follows each
tensor the step creates until it is freed: the largest sum of live bytes is the step's peak.

The batch is prepared in the calling thread (`prepare_probe`: the frozen text encoders run for
real, the VAE on meta for the latents' shape); the step then runs only the denoiser (and the text
encoders when one trains) on meta, so a run probes in a thread of its own while the VAE caches
latents (memory_plan.CheckpointingDecision). Normalisation and matrix ops take shortcuts to their
output shapes (meta_shapes.py). memory_plan.py adds the step's peak to weights, gradients and
optimizer state.
"""

from __future__ import annotations

import functools
import types
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..models.common import base_module
from .meta_autocast import autocast_on_meta, emulates_autocast
from .meta_shapes import FAST as FAST_META
from .norm_casts import affine_norms, step_norms

GB = 1e9  # memory figures are shown in GB (MB below 0.1 GB)


def gb(n: int | float) -> str:
    if n >= 0.1 * GB:
        return f"{n / GB:.1f} GB"
    return f"{n / 1e6:.0f} MB" if n >= 10e6 else f"{n / 1e6:.1f} MB"


# --- measuring ---------------------------------------------------------------------------------------

class LiveBytes(TorchDispatchMode):
    """Follows every tensor storage the ops create until it is freed: `peak` is the largest sum
    of live bytes (meta tensors have sizes but no memory, so this works without any). A view or an
    in-place result of a tensor made before (a weight's transpose in a linear layer) is not a new
    storage and is not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta" and args[0].dtype == torch.bool:
            # a mask's "all set?" test (transformers' attention masks ask `padding_mask.all()`, a CLIP
            # text encoder trained in the step): answered yes, as for unpadded prompts; other values
            # a meta tensor cannot give still fail the probe
            return True
        fast = FAST_META.get(func)
        out = None
        if fast is not None and not kwargs and args[0].device.type == "meta":  # meta_shapes.py: no Python decomposition
            out = fast(*args)
        if out is None:
            out = func(*args, **(kwargs or {}))
        inputs = None
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self._sizes:
                continue
            if inputs is None:
                inputs = {a.untyped_storage()._cdata for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
            if key in inputs:  # a view or in-place result of a tensor made before the probe
                continue
            size = storage.nbytes()
            self._sizes[key] = size
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._freed, key)
        return out

    def _freed(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)


@contextmanager
def on_meta(modules: Iterable[torch.nn.Module], dtype: torch.dtype | None = None):
    """Every parameter and buffer of `modules` replaced by a meta tensor of the same shape (in
    `dtype` when given, for floating ones: the autocast type, which meta tensors do not follow;
    float8 weight codes stay float8, as the layers that hold them read them), put back afterwards.
    Yields {id(real parameter): its stand-in}."""
    saved: list[tuple[dict, str, torch.Tensor]] = []
    stand_ins: dict[int, torch.Tensor] = {}  # id of the real parameter -> its meta stand-in

    def meta(t: torch.Tensor) -> torch.Tensor:
        cast = dtype if dtype is not None and t.is_floating_point() and t.element_size() > 1 else t.dtype
        return torch.empty(t.shape, dtype=cast, device="meta")

    try:
        for root in modules:
            for module in root.modules():
                for name, p in list(module._parameters.items()):
                    if p is not None:
                        saved.append((module._parameters, name, p))
                        if id(p) not in stand_ins:  # shared (tied) weights get one stand-in
                            stand_ins[id(p)] = torch.nn.Parameter(meta(p), requires_grad=p.requires_grad)
                        module._parameters[name] = stand_ins[id(p)]
                for name, b in list(module._buffers.items()):
                    if b is not None:
                        saved.append((module._buffers, name, b))
                        module._buffers[name] = meta(b)
        yield stand_ins
    finally:
        for table, name, t in reversed(saved):
            table[name] = t


@contextmanager
def _flash_attention_on_meta(dtype: torch.dtype | None = None):
    """On meta tensors torch's attention takes the math path, which keeps the full attention
    matrix (in float32); the devices train with a flash / memory-efficient kernel that keeps only
    the output and its log-sum-exp. Route it to the CPU flash kernel's meta function for the
    probe, with the inputs in `dtype` (the autocast type: a GPU's autocast runs attention in it),
    also for diffusers' attention dispatch, which passes `enable_gqa`."""
    import torch.nn.functional as F  # noqa: PLC0415

    original = F.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kw):  # noqa: ANN001
        if query.device.type != "meta" or kw:
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                            enable_gqa=enable_gqa, **kw)
        if enable_gqa and key.shape[-3] != query.shape[-3]:  # grouped-query attention: the kernel takes equal heads
            groups = query.shape[-3] // key.shape[-3]
            key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
        if dtype is not None:
            query, key, value = (t.to(dtype) if t.is_floating_point() else t for t in (query, key, value))
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]

    F.scaled_dot_product_attention = sdpa
    try:
        with _flex_as_native_on_meta():
            yield
    finally:
        F.scaled_dot_product_attention = original


@contextmanager
def _flex_as_native_on_meta():
    """attention_mechanism FLEX: diffusers' FlexAttention backend on meta tensors would build block
    masks and score the whole matrix, where the run (compiled) has a fused kernel; the probe counts
    it as the native backend, which the patch above makes the flash kernel."""
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry  # noqa: PLC0415

    backends = _AttentionBackendRegistry._backends
    flex, native = backends.get(AttentionBackendName.FLEX), backends.get(AttentionBackendName.NATIVE)
    if flex is None or native is None:
        yield
        return

    def flex_or_native(**kwargs):
        return (native if kwargs["query"].device.type == "meta" else flex)(**kwargs)

    backends[AttentionBackendName.FLEX] = flex_or_native
    try:
        yield
    finally:
        backends[AttentionBackendName.FLEX] = flex


@contextmanager
def quantized_on_meta(modules: Iterable[torch.nn.Module], autocast: torch.dtype | None = None):
    """bitsandbytes' 4- and 8-bit layers on meta inputs: their forward needs the quantization state
    that moving the weights to a GPU makes, which a meta stand-in has not. There they run as what
    they compute in training: the weight expanded to the compute type for the product, a
    temporary of the forward and again of the backward (bitsandbytes saves its packed weight, not
    the expanded one: kept for every layer it made a Flux NF4 estimate 30 GB where an H200 measured
    16.5), the result in the autocast type (quantize._bnb_forward casts the input to it, as
    autocast does for a linear layer; `autocast`: that type where the probe follows CUDA autocast
    on meta, meta_autocast.py). Other inputs take their own path."""
    saved = []
    for root in modules:
        for layer in root.modules():
            if type(layer).__name__ not in ("Linear4bit", "Linear8bitLt") or not isinstance(layer, torch.nn.Linear):
                continue
            saved.append((layer, layer.__dict__.get("forward")))
            layer.forward = functools.partial(_meta_linear, layer, layer.forward, autocast)
    try:
        yield
    finally:
        for layer, forward in saved:
            if forward is None:
                del layer.forward
            else:
                layer.forward = forward


def _meta_linear(layer: torch.nn.Linear, forward: Any, autocast: torch.dtype | None, x: torch.Tensor, *args: Any,
                 **kwargs: Any) -> torch.Tensor:
    if x.device.type != "meta":
        return forward(x, *args, **kwargs)
    dtype = autocast or (torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype)
    if not dtype.is_floating_point or not x.is_floating_point():
        dtype = x.dtype
    return _TransientWeightLinear.apply(x.to(dtype), layer.out_features, layer.bias is not None)


class _TransientWeightLinear(torch.autograd.Function):
    """A quantized layer's product on meta: the expanded weight made for the forward and again for
    the backward, saved by neither (the frozen weight has no gradient)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, out_features: int, bias: bool) -> torch.Tensor:  # noqa: ANN001
        import torch.nn.functional as F  # noqa: PLC0415

        ctx.shape = (out_features, x.shape[-1])
        weight = torch.empty(ctx.shape, dtype=x.dtype, device="meta")
        return F.linear(x, weight, torch.empty(out_features, dtype=x.dtype, device="meta") if bias else None)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # noqa: ANN001, ANN205
        return grad @ torch.empty(ctx.shape, dtype=grad.dtype, device="meta"), None, None


def set_checkpointing(module: torch.nn.Module, on: bool) -> None:
    module = base_module(module)
    if hasattr(module, "enable_gradient_checkpointing"):  # diffusers models
        if on:
            module.enable_gradient_checkpointing()
        else:
            module.disable_gradient_checkpointing()
    elif on:  # transformers models (5.x: activation_checkpointing_*; the old names warn)
        if hasattr(module, "activation_checkpointing_enable"):
            module.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif _is_checkpointing(module):
        (getattr(module, "activation_checkpointing_disable", None) or module.gradient_checkpointing_disable)()


@dataclass
class ProbeBatch:
    """What one probe step starts from, prepared in the calling thread (`prepare_probe`): the
    batch (latents on the meta device) and, with every text encoder frozen, the captions'
    embeddings encoded for real. The step itself (`measure_step`) then touches only the parts
    that `swapped` names, so the VAE and the frozen text encoders stay free for latent caching
    while it runs in another thread."""

    batch: Any
    text: Any  # an _Encoded stand-in for the text cache, or None: the step encodes (trained encoders)
    swapped: tuple[str, ...]  # the parts the step runs on meta: the denoiser, the text encoders when one trains
    start_bytes: int  # the batch's own tensors, live when the step starts


@contextmanager
def _objects_restored(model: Any, modules: list[torch.nn.Module]):
    """Schedulers keep tensors moved to the device of the last call (diffusers' add_noise), and so
    do helper objects inside the models (Z-Image's rope embedder caches `freqs_cis` moved to the
    device of its input): the noise scheduler and every plain object the modules hold are put
    back as they were."""
    objects = [s for s in (getattr(model, "noise_scheduler", None),) if s is not None]
    objects += _helper_objects(modules)
    saved = [dict(vars(s)) for s in objects]
    try:
        yield
    finally:
        for s, state in zip(objects, saved, strict=True):
            vars(s).clear()
            vars(s).update(state)


def prepare_probe(model: Any, precision: Any, config: Any, trained_text_parts: frozenset[str]) -> ProbeBatch:
    """The probe's batch at the config's batch size and largest resolution (see ProbeBatch)."""
    from ..data.batches import Batch  # noqa: PLC0415
    from ..data.video import run_sampling  # noqa: PLC0415
    from .diffusion import DiffusionStep  # noqa: PLC0415

    height, width = _probe_size(config, model.bucket_step)
    batch_size = config.batch_size
    meta = torch.device("meta")
    captions = ["a photo of a cat, detailed"] * batch_size
    text = None
    modules = list(model.parts.values())
    with _rng_untouched(), _objects_restored(model, modules):
        if not trained_text_parts:
            # Frozen text encoders run under no_grad before the denoiser and their activations are
            # freed before its forward, so they cannot add to the step's peak: encode the probe's
            # captions for real here (language-model encoders, e.g. Qwen3 or Mistral3, cannot run on
            # meta tensors: transformers' masks call .item()) and give the step those embeddings.
            step = DiffusionStep(model, config, meta, precision)
            with torch.no_grad(), precision.autocast():
                text = _Encoded(model.encode_text(step.text_inputs(captions)))
        with on_meta(modules, precision.dtype), torch.no_grad():
            sampling = run_sampling(config, model.frame_step)  # a video family: clips of the run's frame count
            frames = () if sampling is None else (sampling.count(sampling.frames),)
            latents = model.encode_images(torch.zeros(batch_size, 3, *frames, height, width, device=meta)).float()
    batch = Batch(size=(height, width), captions=captions, loss_weights=torch.ones(batch_size, device=meta),
                  image_paths=[""] * batch_size, latents=latents, original_sizes=[(height, width)] * batch_size,
                  crop_top_lefts=[(0, 0)] * batch_size)
    if model.inpainting or model.conditioning_kind == "control":  # the masked image's / control image's latents
        batch.conditioning_latents = torch.zeros_like(latents)
    elif model.conditioning_kind == "depth":  # its depth maps (B, 1, h, w)
        batch.conditioning_latents = torch.zeros_like(latents[:, :1])
    start = latents.nbytes + batch.loss_weights.nbytes + (0 if batch.conditioning_latents is None else batch.conditioning_latents.nbytes)
    # a trained text encoder runs in the step, and then so do the frozen ones (no embeddings cached)
    encoders = tuple(name for name in model.text_encoder_names if name in model.parts) if trained_text_parts else ()
    return ProbeBatch(batch, text, (model.denoiser, *encoders), start)


@contextmanager
def _autocast_guards_on_meta():
    """Models that turn autocast off around a computation name their tensors' device type, which
    torch.autocast refuses for "meta" (Ideogram 4's and ERNIE-Image's rotary embeddings); on meta nothing is computed,
    so for the probe such a guard is a disabled CPU one."""
    original = torch.autocast

    class MetaSafe(original):
        def __init__(self, device_type: str, *args: Any, **kwargs: Any) -> None:
            if device_type == "meta":
                device_type, kwargs["enabled"] = "cpu", False
            super().__init__(device_type, *args, **kwargs)

    torch.autocast = MetaSafe
    try:
        yield
    finally:
        torch.autocast = original


def measure_step(model: Any, config: Any, precision: Any, trained_text_parts: frozenset[str],
                 trained: list[torch.Tensor], probe: ProbeBatch | None = None) -> int:
    """Peak live bytes of one training step (forward, loss, backward) at the config's batch size
    and resolution, all on the meta device (see the module's notes). `probe`: the batch prepared
    by `prepare_probe` (prepared here when not given)."""
    from ..config.optimizer import fused_back_pass_on  # noqa: PLC0415
    from .diffusion import DiffusionStep  # noqa: PLC0415

    probe = probe or prepare_probe(model, precision, config, trained_text_parts)
    step = DiffusionStep(model, config, torch.device("meta"), precision)
    if model.image_to_video_share > 0:  # the step where every clip starts from its first frame: per-token timesteps
        step.first_frame_share = 1.0
    if probe.text is not None:
        step.text_cache = probe.text
    params = [p for p in trained if p.requires_grad]
    modules = [model.parts[name] for name in probe.swapped]
    # under CUDA autocast the weights keep their own types and the casts are autocast's (meta_autocast.py)
    emulated = precision.dtype if emulates_autocast(precision) else None
    with _objects_restored(model, modules), on_meta(modules, None if emulated else precision.dtype) as stand_ins, \
            _vectors_on_meta(model, modules, stand_ins), \
            _flash_attention_on_meta(precision.dtype), _autocast_guards_on_meta(), quantized_on_meta(modules, emulated), LiveBytes() as live, \
            autocast_on_meta(emulated) if emulated else nullcontext(), \
            step_norms([] if config.compile else affine_norms(modules), emulated, torch.device("meta")):  # as the step runs them
        live.live = live.peak = probe.start_bytes  # the step starts from its batch
        loss = step.loss(probe.batch, trained_text_parts)
        _backward(loss, [stand_ins[id(p)] for p in params if id(p) in stand_ins],
                  fused_back_pass_on(config) and config.gradient_accumulation_steps <= 1)  # accumulating: all held
    return live.peak


def _backward(loss: torch.Tensor, params: list[torch.Tensor], fused: bool) -> None:
    """The probe's backward pass. With the fused back pass each gradient is stepped and freed as
    soon as it is complete, so the step never holds them all: the probe drops each one then."""
    if not fused:
        torch.autograd.grad(loss, params, allow_unused=True)
        return

    def drop(p: torch.Tensor) -> None:
        p.grad = None

    hooks = [p.register_post_accumulate_grad_hook(drop) for p in params]
    try:
        loss.backward(inputs=params)
    finally:
        for hook in hooks:
            hook.remove()


@contextmanager
def _vectors_on_meta(model: Any, modules: list[torch.nn.Module], stand_ins: dict[int, torch.Tensor]):
    """Embedding vectors (held as plain tensors by the text encoders' input embeddings and by the
    output-embedding hook, not as module parameters) replaced by meta stand-ins for the probe, so
    the backward pass reaches them; added to `stand_ins`, put back afterwards."""
    from .embeddings import TokenEmbedding  # noqa: PLC0415
    from .output_embeddings import OutputVectors  # noqa: PLC0415

    def stand_in(v: torch.Tensor) -> torch.Tensor:
        if id(v) not in stand_ins:
            stand_ins[id(v)] = torch.nn.Parameter(torch.empty(v.shape, dtype=v.dtype, device="meta"), requires_grad=v.requires_grad)
        return stand_ins[id(v)]

    saved: list[tuple[Any, str, Any]] = []
    try:
        for root in modules:
            for module in root.modules():
                if isinstance(module, TokenEmbedding) and module.vectors:
                    saved.append((module, "vectors", module.vectors))
                    module.vectors = [stand_in(v) for v in module.vectors]
        hook = getattr(model, "output_embeddings", None)
        for embedding in hook.embeddings if isinstance(hook, OutputVectors) else ():
            if embedding.outputs:
                saved.append((embedding, "outputs", embedding.outputs))
                embedding.outputs = {part: stand_in(v) for part, v in embedding.outputs.items()}
        yield
    finally:
        for holder, name, value in reversed(saved):
            setattr(holder, name, value)


@contextmanager
def _rng_untouched():
    """Run a block without changing the random streams training draws from (torch on the CPU and
    GPUs, Python's, NumPy's): the probe draws timesteps and noise like a step does."""
    import random  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    py, npy = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


def measure_step_cached(model: Any, config: Any, precision: Any, trained_text_parts: frozenset[str],
                        trained: list[torch.Tensor], probe: ProbeBatch | None = None) -> tuple[int, bool]:
    """`measure_step`, or its result for the same model structure and step settings from an earlier
    run (memory_probe_cache.py): (peak, reused?)."""
    from . import memory_probe_cache as cache  # noqa: PLC0415

    try:
        checkpointing = {name: _is_checkpointing(part) for name, part in model.parts.items()}
        key = cache.probe_key(model, config, precision, trained_text_parts, checkpointing)
    except Exception:  # noqa: BLE001 - a model whose structure cannot be described is probed every time
        key = None
    peak = None if key is None else cache.cached_peak(config, key)
    if peak is not None:
        return peak, True
    with _rng_untouched():  # a probed run and one that reused the probe draw the same random numbers after it
        peak = measure_step(model, config, precision, trained_text_parts, trained, probe)
    if key is not None:
        cache.store_peak(config, key, peak)
    return peak, False


def _helper_objects(modules: list[torch.nn.Module]) -> list[Any]:
    """Plain (non-module, non-tensor) objects with attributes held by the modules' submodules."""
    seen: set[int] = set()
    out = []
    plain = (bool, int, float, str, tuple, list, dict, set, type(None), OrderedDict)  # most attributes (hooks): nothing to restore
    skip = (torch.nn.Module, torch.Tensor, type, types.FunctionType, types.MethodType, functools.partial)
    for module in modules:
        for sub in module.modules():
            for value in vars(sub).values():
                if type(value) in plain:
                    continue
                if (isinstance(getattr(value, "__dict__", None), dict) and value.__dict__ and not isinstance(value, skip)
                        and id(value) not in seen):
                    seen.add(id(value))
                    out.append(value)
    return out


class _Encoded:
    """A stand-in for the text cache in the probe: the embeddings encoded before it."""

    def __init__(self, conditioning: Any) -> None:
        self.conditioning = conditioning

    def encode(self, texts: Any, encode_fn: Any, device: Any = None) -> Any:  # noqa: ARG002 - the cache's signature
        return self.conditioning


def _probe_size(config: Any, model_step: int | None = None) -> tuple[int, int]:
    """(height, width) of the largest bucket the config's resolutions train at, as the run buckets
    them (data/buckets.py; OneTrainer's buckets reach some 5% above the resolution's area, a fixed
    "WxH" is itself; without bucketing: the resolution)."""
    from ..config.resolution import parse_resolutions  # noqa: PLC0415
    from ..data.buckets import Bucketing, as_size  # noqa: PLC0415

    bucketing = Bucketing.from_config(config, model_step)
    try:
        sizes = [size for target in parse_resolutions(config.resolution)
                 for size in (bucketing.sizes(target) if bucketing.enabled else (as_size(target),))]
    except ValueError:  # refused before the run
        return (512, 512)
    return max(sizes, key=lambda s: s[0] * s[1])


def _is_checkpointing(module: torch.nn.Module) -> bool:
    module = base_module(module)
    name = "is_activation_checkpointing" if hasattr(type(module), "is_activation_checkpointing") else "is_gradient_checkpointing"
    flag = getattr(module, name, None)  # transformers 5.x renamed it (the old name warns)
    if flag is None:
        flag = any(getattr(m, "gradient_checkpointing", False) for m in module.modules())
    return bool(flag)
