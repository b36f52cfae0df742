"""The memory planner: a run's peak memory on its device, estimated before training starts, and
the AUTO choices it makes (gradient checkpointing on only when the run would not fit without it).

The estimate adds up
- weights: the bytes of every part's parameters and buffers as loaded (per part and dtype);
- gradients of the trained parameters (in their dtype) and the optimizer's state, measured by
  stepping the configured optimizer once on a probe matrix and counting its state bytes per
  weight (so 8-bit and factored optimizers come out smaller, Prodigy bigger);
- activations: measured, not looked up. The training step itself (`DiffusionStep.loss` and the
  backward pass) runs once at the configured batch size and resolution with every weight and
  input on the meta device, so nothing is computed or allocated, while a dispatch mode follows
  each tensor the step creates until it is freed: the largest sum of live bytes is the step's
  peak (activations, their gradients in the backward pass, the weights' gradients), with and
  without gradient checkpointing (the real recomputation runs too). Its batch is prepared first
  (`prepare_probe`: the frozen text encoders run for real, the VAE on meta for the latents' shape);
  the step then runs only the denoiser (and the text encoders when one trains) on meta, so a run
  probes in a thread of its own while the VAE caches latents (`CheckpointingDecision`). The
  normalisation and matrix ops take shortcuts to their output shapes (meta_shapes.py);
- what the process already holds besides the weights (CPU: its resident memory; the Python and
  torch runtime) or, on CUDA, what torch has reserved.

The available memory is on CPU the machine's RAM (MemAvailable, plus what this process already
holds, since the estimate counts that), on CUDA the device's free memory (plus what torch has
reserved). `free_memory` is the one place that reads it; tests replace it.
"""

from __future__ import annotations

import functools
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..config.enums import GradientCheckpointing
from .meta_shapes import FAST as FAST_META

MARGIN = 0.9  # a run "fits" when its estimated peak is at most this share of the available memory
GB = 1e9


def gb(n: int | float) -> str:
    if n >= 0.1 * GB:
        return f"{n / GB:.1f} GB"
    return f"{n / 1e6:.0f} MB" if n >= 10e6 else f"{n / 1e6:.1f} MB"


# --- what the device has -------------------------------------------------------------------------

def resident_bytes() -> int:
    """This process's resident memory (VmRSS)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil  # noqa: PLC0415

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        return 0


def free_memory(device: torch.device) -> int | None:
    """Bytes a run on `device` can still take: MemAvailable on CPU (psutil where /proc is not
    there), the device's free memory on CUDA; None where it cannot be known (MPS, ...)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == "cpu":
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            import psutil  # noqa: PLC0415

            return int(psutil.virtual_memory().available)
        except ImportError:
            return None
    return None


def held_bytes(device: torch.device) -> int:
    """What this process already holds on `device` (counted in the estimate, so added back to the
    free figure): resident memory on CPU, torch's reserved memory on CUDA."""
    if device.type == "cuda":
        return int(torch.cuda.memory_reserved(device))
    return resident_bytes() if device.type == "cpu" else 0


# --- the plan --------------------------------------------------------------------------------------

@dataclass
class MemoryPlan:
    device: str
    weights: dict[str, tuple[str, int]]  # part -> (dtypes, bytes)
    gradients: int  # the trained weights' gradients
    optimizer_state: int
    optimizer_note: str
    overhead: int  # held by the process besides the weights (CPU: runtime; CUDA: reserved beyond them)
    step_peak: dict[bool, int | None] = field(default_factory=dict)  # checkpointing -> measured step peak
    probe_error: str = ""
    free: int | None = None  # available for the run (see the module's notes)
    offloaded: int = 0  # frozen weights layer offloading keeps in RAM (offload.py): not on the device
    probe_reused: bool = False  # a step peak came from memory-probe.json (memory_probe_cache.py), not a new probe

    @property
    def weight_bytes(self) -> int:
        return sum(b for _, b in self.weights.values()) - self.offloaded

    def activations(self, checkpointing: bool) -> int | None:
        peak = self.step_peak.get(checkpointing)
        return None if peak is None else max(0, peak - self.gradients)

    def peak(self, checkpointing: bool) -> int | None:
        acts = self.activations(checkpointing)
        if acts is None:
            return None
        return self.overhead + self.weight_bytes + self.gradients + self.optimizer_state + acts

    def fits(self, checkpointing: bool) -> bool | None:
        peak = self.peak(checkpointing)
        if peak is None or self.free is None:
            return None
        return peak <= MARGIN * self.free

    def breakdown(self, checkpointing: bool) -> str:
        parts = ", ".join(f"{name} {gb(b)} {dt}" for name, (dt, b) in self.weights.items())
        acts = self.activations(checkpointing)
        ram = f", {gb(self.offloaded)} of them offloaded to RAM, not counted here" if self.offloaded else ""
        return (f"weights {gb(self.weight_bytes)} ({parts}{ram}); gradients {gb(self.gradients)}; optimizer state "
                f"{gb(self.optimizer_state)} ({self.optimizer_note}); activations "
                f"{'not measured' if acts is None else gb(acts)}{' (probe of an earlier run reused)' if self.probe_reused else ''}; "
                f"runtime {gb(self.overhead)}")

    def line(self, checkpointing: bool) -> str:
        """'peak ≈ 9.8 GB on cuda:0 (23.5 GB free): fits' (or what to turn on)."""
        peak = self.peak(checkpointing)
        if peak is None:
            return f"peak on {self.device}: not measured ({self.probe_error})"
        free = "free memory unknown" if self.free is None else f"{gb(self.free)} free"
        text = f"peak ≈ {gb(peak)} on {self.device} ({free}), gradient checkpointing {'on' if checkpointing else 'off'}"
        fits = self.fits(checkpointing)
        if fits is None:
            return text
        if fits:
            return text + ": fits"
        advice = []
        if not checkpointing:
            advice.append("gradient checkpointing")
        advice += ["a smaller batch size or resolution", "16-bit weights (weight data type)", "fused back pass"]
        return text + ": does not fit: turn on " + advice[0] + " or use " + ", ".join(advice[1:])


# --- measuring ---------------------------------------------------------------------------------------

class LiveBytes(TorchDispatchMode):
    """Follows every tensor storage the ops create until it is freed: `peak` is the largest sum
    of live bytes (meta tensors have sizes but no memory, so this works without any)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        fast = FAST_META.get(func)
        out = None
        if fast is not None and not kwargs and args[0].device.type == "meta":  # meta_shapes.py: no Python decomposition
            out = fast(*args)
        if out is None:
            out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self._sizes:
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
    `dtype` when given, for floating ones: the autocast type, which meta tensors do not follow),
    put back afterwards. Yields {id(real parameter): its stand-in}."""
    saved: list[tuple[dict, str, torch.Tensor]] = []
    stand_ins: dict[int, torch.Tensor] = {}  # id of the real parameter -> its meta stand-in

    def meta(t: torch.Tensor) -> torch.Tensor:
        cast = dtype if dtype is not None and t.is_floating_point() else t.dtype
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
def _flash_attention_on_meta():
    """On meta tensors torch's attention takes the math path, which keeps the full attention
    matrix; the devices train with a flash / memory-efficient kernel that keeps only the output
    and its log-sum-exp. Route it to the CPU flash kernel's meta function for the probe."""
    import torch.nn.functional as F  # noqa: PLC0415

    original = F.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):  # noqa: ANN001
        if query.device.type != "meta" or kw:
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def set_checkpointing(module: torch.nn.Module, on: bool) -> None:
    module = module.get_base_model() if hasattr(module, "get_base_model") else module
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
    from .diffusion import DiffusionStep  # noqa: PLC0415

    height, width = _probe_size(config.resolution)
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
            latents = model.encode_images(torch.zeros(batch_size, 3, height, width, device=meta)).float()
    batch = Batch(size=(height, width), captions=captions, loss_weights=torch.ones(batch_size, device=meta),
                  image_paths=[""] * batch_size, latents=latents, original_sizes=[(height, width)] * batch_size,
                  crop_top_lefts=[(0, 0)] * batch_size)
    if model.inpainting:
        batch.conditioning_latents = torch.zeros_like(latents)
    start = latents.nbytes * (2 if model.inpainting else 1) + batch.loss_weights.nbytes
    # a trained text encoder runs in the step, and then so do the frozen ones (no embeddings cached)
    encoders = tuple(name for name in model.text_encoder_names if name in model.parts) if trained_text_parts else ()
    return ProbeBatch(batch, text, (model.denoiser, *encoders), start)


def measure_step(model: Any, config: Any, precision: Any, trained_text_parts: frozenset[str],
                 trained: list[torch.Tensor], probe: ProbeBatch | None = None) -> int:
    """Peak live bytes of one training step (forward, loss, backward) at the config's batch size
    and resolution, all on the meta device (see the module's notes). `probe`: the batch prepared
    by `prepare_probe` (prepared here when not given)."""
    from .diffusion import DiffusionStep  # noqa: PLC0415

    probe = probe or prepare_probe(model, precision, config, trained_text_parts)
    step = DiffusionStep(model, config, torch.device("meta"), precision)
    if probe.text is not None:
        step.text_cache = probe.text
    params = [p for p in trained if p.requires_grad]
    modules = [model.parts[name] for name in probe.swapped]
    with _objects_restored(model, modules), on_meta(modules, precision.dtype) as stand_ins, \
            _flash_attention_on_meta(), LiveBytes() as live:
        live.live = live.peak = probe.start_bytes  # the step starts from its batch
        loss = step.loss(probe.batch, trained_text_parts)
        meta_params = [stand_ins[id(p)] for p in params if id(p) in stand_ins]
        torch.autograd.grad(loss, meta_params, allow_unused=True)
    return live.peak


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


def _probe_size(resolution: str) -> tuple[int, int]:
    """The largest training size the resolution allows ('512', '768x512', '512,768': the largest)."""
    sizes = []
    for item in str(resolution).replace(" ", "").split(","):
        if not item:
            continue
        h, _, w = item.partition("x")
        sizes.append((int(h), int(w or h)))
    return max(sizes, key=lambda s: s[0] * s[1]) if sizes else (512, 512)


def optimizer_state_per_weight(optimizer_config: Any, dtype: torch.dtype) -> tuple[float, str]:
    """Bytes of optimizer state per trained weight, measured by one step of the configured
    optimizer on a 256 x 256 probe matrix (on CPU). Falls back to Adam's two states when the
    optimizer cannot run there."""
    from .optimizers import create_optimizer  # noqa: PLC0415

    probe = torch.nn.Parameter(torch.randn(256, 256, dtype=dtype) * 0.01)
    name = str(getattr(optimizer_config, "optimizer", "optimizer"))
    try:
        opt = create_optimizer([{"params": [probe], "lr": 1e-4, "name": "probe"}], optimizer_config, torch.device("cpu"))
        probe.grad = torch.randn_like(probe) * 0.01
        opt.step()
        seen: set[int] = set()
        total = 0
        for state in opt.state.values():
            for value in state.values() if isinstance(state, dict) else ():
                if isinstance(value, torch.Tensor) and value.untyped_storage()._cdata not in seen:
                    seen.add(value.untyped_storage()._cdata)
                    total += value.untyped_storage().nbytes()
        return total / probe.numel(), f"{name}: {total / probe.numel():.1f} bytes per weight, measured"
    except Exception as err:  # noqa: BLE001 - e.g. a GPU-only kernel; the estimate goes on
        return 2.0 * probe.element_size(), f"{name}: not measured on CPU ({type(err).__name__}), counted as Adam's two states"


def part_weights(model: Any) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    seen: set[int] = set()
    for name, module in model.parts.items():
        size, dtypes = 0, set()
        for t in [*module.parameters(), *module.buffers()]:
            key = t.untyped_storage()._cdata if t.device.type != "meta" else id(t)
            if key in seen:
                continue
            seen.add(key)
            size += t.untyped_storage().nbytes() if t.device.type != "meta" else t.numel() * t.element_size()
            dtypes.add(str(t.dtype).removeprefix("torch."))
        out[name] = ("/".join(sorted(dtypes)), size)
    return out


class PendingPlan:
    """A plan whose step probes run in a thread of their own (`start_plan(background=True)`), so
    the caller can cache latents meanwhile; `result()` waits for them. The probes run the parts
    that ProbeBatch.swapped names on the meta device: the caller must not use those (the denoiser,
    and the text encoders when one trains) until `result()` returns."""

    def __init__(self, plan: MemoryPlan, work: Callable[[], None], background: bool) -> None:
        self.plan = plan
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=work, name="ot-memory-probe", daemon=True)
            self._thread.start()
        else:
            work()

    def result(self) -> MemoryPlan:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self.plan


def start_plan(model: Any, config: Any, device: torch.device, precision: Any, param_groups: list[Any],
               trained_text_parts: frozenset[str], checkpoint_parts: Iterable[str], *,
               measure: tuple[bool, ...] = (False, True), free_fn: Callable[[torch.device], int | None] | None = None,
               background: bool = False) -> PendingPlan:
    """The plan of a run whose model is loaded on `device` with the method's layers added.
    `checkpoint_parts` are the parts whose checkpointing the probes turn on and off (the others
    stay as they are); `measure` says which of the two probes to run. The weights, gradients,
    optimizer state and free memory are read here; the probes run in a thread of their own with
    `background` (see PendingPlan), else here."""
    free_fn = free_fn or free_memory
    trained = [p for g in param_groups for p in g.params if p.requires_grad]
    weights = part_weights(model)
    grad_bytes = sum(p.numel() * p.element_size() for p in trained)
    per_weight, note = optimizer_state_per_weight(config.optimizer, trained[0].dtype if trained else torch.float32)
    if getattr(config.optimizer, "fused_back_pass", False):
        grad_bytes = max((p.numel() * p.element_size() for p in trained), default=0)  # one weight's at a time
    opt_bytes = int(per_weight * sum(p.numel() for p in trained))
    if getattr(config, "ema", "OFF") not in ("OFF", None) and str(config.ema) == "GPU":
        opt_bytes += sum(p.numel() * 4 for p in trained)
    held = held_bytes(device)
    overhead = max(0, held - sum(b for _, b in weights.values())) if device.type == "cpu" else max(0, held - torch.cuda.memory_allocated(device)) if device.type == "cuda" else 0
    free = free_fn(device)
    plan = MemoryPlan(str(device), weights, grad_bytes, opt_bytes, note, overhead, free=None if free is None else free + held)
    if device.type != "cpu":  # layer offloading: those weights are in RAM (on CPU all of them are)
        from .offload import offloaded_bytes  # noqa: PLC0415

        plan.offloaded = offloaded_bytes(model)
    parts = [p for p in checkpoint_parts if p in model.parts]
    before = {p: _is_checkpointing(model.parts[p]) for p in parts}

    def failed(err: Exception) -> None:  # a model the meta probe cannot run: say so, decide safely
        plan.probe_error = f"the meta probe failed: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        plan.step_peak = {}

    try:
        probe = prepare_probe(model, precision, config, trained_text_parts) if measure else None
    except Exception as err:  # noqa: BLE001
        failed(err)
        return PendingPlan(plan, lambda: None, background=False)

    def work() -> None:
        try:
            for on in measure:
                for part in parts:
                    set_checkpointing(model.parts[part], on)
                plan.step_peak[on], reused = measure_step_cached(model, config, precision, trained_text_parts, trained, probe)
                plan.probe_reused |= reused
        except Exception as err:  # noqa: BLE001
            failed(err)
        finally:
            for part, on in before.items():
                set_checkpointing(model.parts[part], on)

    # an inpainting step encodes its blank image with the VAE (sd_inpainting.blank_latents), which
    # latent caching uses meanwhile: those probes run here
    return PendingPlan(plan, work, background and not model.inpainting)


def plan_run(model: Any, config: Any, device: torch.device, precision: Any, param_groups: list[Any],
             trained_text_parts: frozenset[str], checkpoint_parts: Iterable[str], *,
             measure: tuple[bool, ...] = (False, True), free_fn: Callable[[torch.device], int | None] | None = None) -> MemoryPlan:
    """`start_plan`, probed here."""
    return start_plan(model, config, device, precision, param_groups, trained_text_parts, checkpoint_parts,
                      measure=measure, free_fn=free_fn).result()


def _is_checkpointing(module: torch.nn.Module) -> bool:
    module = module.get_base_model() if hasattr(module, "get_base_model") else module
    name = "is_activation_checkpointing" if hasattr(type(module), "is_activation_checkpointing") else "is_gradient_checkpointing"
    flag = getattr(module, name, None)  # transformers 5.x renamed it (the old name warns)
    if flag is None:
        flag = any(getattr(m, "gradient_checkpointing", False) for m in module.modules())
    return bool(flag)


def choose_checkpointing(plan: MemoryPlan) -> tuple[bool, str]:
    """AUTO: (on?, why). Off when the run fits without it; on when it does not, or when that cannot
    be known (the probe failed, or the device does not say how much memory it has)."""
    without = plan.peak(False)
    if without is None:
        return True, f"AUTO -> ON: activations not measured ({plan.probe_error})"
    if plan.free is None:
        return True, f"AUTO -> ON: {plan.device} does not report its free memory (peak without it ≈ {gb(without)})"
    if without <= MARGIN * plan.free:
        return False, f"AUTO -> OFF: {plan.line(False)}"
    with_it = plan.peak(True)
    extra = "" if with_it is None else f"; with it ≈ {gb(with_it)}{'' if plan.fits(True) else ', which does not fit either'}"
    return True, (f"AUTO -> ON: without it the peak ≈ {gb(without)} is more than {int(MARGIN * 100)}% of the "
                  f"{gb(plan.free)} free on {plan.device}{extra}")


class CheckpointingDecision:
    """Gradient checkpointing for the parts in `settings` ({part: AUTO/ON/OFF}): ON parts always,
    AUTO parts when the planner says the run does not fit without it. The probe starts when this
    is made (in a thread of its own with `background`, see PendingPlan); `finish()` waits for it,
    sets checkpointing and returns ({part: on?}, the message for the log and events, the plan or
    None without AUTO)."""

    def __init__(self, model: Any, config: Any, device: torch.device, precision: Any, param_groups: list[Any],
                 trained_text_parts: frozenset[str], settings: dict[str, Any],
                 free_fn: Callable[[torch.device], int | None] | None = None, background: bool = False) -> None:
        self.settings = {part: GradientCheckpointing(value) for part, value in settings.items()}
        self.auto = [part for part, value in self.settings.items() if value == GradientCheckpointing.AUTO]
        self._args = (model, config, device, precision, param_groups, trained_text_parts, self.auto)
        self._free_fn = free_fn
        self._pending = start_plan(*self._args, measure=(False,), free_fn=free_fn, background=background) if self.auto else None

    def wait(self) -> None:
        """Until the probe is done (the model's parts are all back)."""
        if self._pending is not None:
            self._pending.result()

    def finish(self) -> tuple[dict[str, bool], str, MemoryPlan | None]:
        model = self._args[0]
        chosen = {part: value == GradientCheckpointing.ON for part, value in self.settings.items()}
        plan, reason = None, ""
        if self._pending is not None:
            plan = self._pending.result()
            on, reason = choose_checkpointing(plan)
            if on and plan.peak(False) is not None:  # measure with it too, to say whether that fits
                plan = plan_run(*self._args, free_fn=self._free_fn)
                on, reason = choose_checkpointing(plan)
            chosen.update(dict.fromkeys(self.auto, on))
        for part, on in chosen.items():
            set_checkpointing(model.parts[part], on)
        described = ", ".join(f"{part} {'on' if on else 'off'} ({'AUTO' if part in self.auto else 'set in the config'})"
                              for part, on in chosen.items())
        message = f"gradient checkpointing: {described}" + (f"; {reason}" if reason else "")
        if plan is not None:
            message += f"; memory: {plan.breakdown(any(chosen[p] for p in self.auto))}"
        return chosen, message, plan


def decide_checkpointing(model: Any, config: Any, device: torch.device, precision: Any, param_groups: list[Any],
                         trained_text_parts: frozenset[str], settings: dict[str, Any],
                         free_fn: Callable[[torch.device], int | None] | None = None) -> tuple[dict[str, bool], str, MemoryPlan | None]:
    """`CheckpointingDecision`, probed here."""
    return CheckpointingDecision(model, config, device, precision, param_groups, trained_text_parts, settings,
                                 free_fn).finish()


def estimate_line(config: Any) -> str:
    """`validate`'s line (see `estimate`)."""
    return estimate(config)["line"]


def estimate(config: Any) -> dict[str, Any]:
    """The model loaded as a run loads it (on the train device, the method's layers added), the
    plan and gradient checkpointing's choice: {"estimated": bool, "summary": 'peak ≈ ...: fits',
    "line": the summary with the choice and the breakdown}. Never raises: a model that cannot be
    loaded here gives 'not estimated' and why."""
    from ..config.families import family_info  # noqa: PLC0415
    from ..models.registry import get_family  # noqa: PLC0415
    from .device import Precision, resolve_device, weight_dtype  # noqa: PLC0415
    from .diffusion import configure_model  # noqa: PLC0415
    from .methods import get_method  # noqa: PLC0415

    try:
        device, _ = resolve_device(config.train_device)
        precision = Precision(config.train_dtype, device, config.enable_autocast_cache)
        parts = family_info(config.model_type).parts
        dtypes = {part: weight_dtype(getattr(config, part).weight_dtype, device, precision.dtype) for part in parts}
        model = get_family(config.model_type).load(config.base_model_name, cache_dir=config.huggingface_cache_dir or None,
                                                   offline=config.offline_mode, dtypes=dtypes)
        model.to(device)
        configure_model(model, config, device, precision)
        groups = get_method(config.training_method).setup(model, config, device)
        from .offload import install_offloading  # noqa: PLC0415

        install_offloading(model, config, device)  # as a run does: its weights in RAM are not counted on the device
        text = frozenset(g.model_part for g in groups if g.model_part in model.text_encoder_names and g.trains)
        settings = {part: getattr(config, part).gradient_checkpointing for part in (model.denoiser, *sorted(text))}
        chosen, message, plan = decide_checkpointing(model, config, device, precision, groups, text, settings)
        on = chosen[model.denoiser]
        if plan is not None:  # AUTO: the message has the plan's line and breakdown
            on = any(chosen[p] for p in settings if GradientCheckpointing(settings[p]) == GradientCheckpointing.AUTO)
            return {"estimated": plan.peak(on) is not None, "summary": plan.line(on), "line": message}
        plan = plan_run(model, config, device, precision, groups, text, [], measure=(on,))  # explicit: as set
        line = f"{plan.line(on)}; {message}; memory: {plan.breakdown(on)}"
        return {"estimated": plan.peak(on) is not None, "summary": plan.line(on), "line": line}
    except Exception as err:  # noqa: BLE001 - validate goes on without the estimate
        text = f"not estimated ({type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''})"
        return {"estimated": False, "summary": text, "line": text}


__all__ = [
    "MARGIN", "CheckpointingDecision", "LiveBytes", "MemoryPlan", "PendingPlan", "choose_checkpointing", "decide_checkpointing", "estimate", "estimate_line", "free_memory", "measure_step", "on_meta",
    "optimizer_state_per_weight", "plan_run", "prepare_probe", "set_checkpointing", "start_plan",
]
