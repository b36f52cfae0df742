"""The memory planner: a run's peak memory on its device, estimated before training starts, and
the AUTO choices it makes (gradient checkpointing on only when the run would not fit without it).

The estimate adds up
- weights: the bytes of every part's parameters and buffers as loaded (per part and dtype), less
  the frozen weights layer offloading keeps in RAM and the parts the trainer keeps in RAM while
  the steps run (placement.py: the VAE and the cached text encoders, with latent caching on;
  they come to the device only for samples, whose peak this does not estimate);
- gradients of the trained parameters (in their dtype) and the optimizer's state, measured by
  stepping the configured optimizer once on a probe of each distinct weight shape and counting its
  state bytes (so 8-bit and factored optimizers come out smaller, Prodigy bigger; a factored
  optimizer's state depends on the shape: Adafactor keeps 2.7 bytes per weight of a 3x3
  convolution, 0.03 of a 256 x 256 matrix);
- activations: measured, not looked up, by one training step on meta tensors (memory_probe.py),
  with and without gradient checkpointing; the step's peak holds the activations, their
  gradients in the backward pass and the weights' gradients. A run probes in a thread of its own
  while the VAE caches latents (`CheckpointingDecision`);
- what the process already holds besides the weights (CPU: its resident memory; the Python and
  torch runtime) or, on CUDA, what torch has reserved.

The available memory is on CPU the machine's RAM (MemAvailable, plus what this process already
holds, since the estimate counts that), on CUDA the device's free memory (plus what torch has
reserved). `free_memory` is the one place that reads it; tests replace it.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config.enums import GradientCheckpointing
from ..config.include_parts import excluded_parts
from .memory_probe import (
    LiveBytes,
    _is_checkpointing,
    gb,
    measure_step,
    measure_step_cached,
    on_meta,
    prepare_probe,
    set_checkpointing,
)

MARGIN = 0.9  # a run "fits" when its estimated peak is at most this share of the available memory


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
    parked: list[str] = field(default_factory=list)  # parts in RAM while the steps run (placement.py): not on the device

    @property
    def parked_bytes(self) -> int:
        return sum(self.weights[p][1] for p in self.parked if p in self.weights)

    @property
    def weight_bytes(self) -> int:
        return sum(b for _, b in self.weights.values()) - self.offloaded - self.parked_bytes

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
        if self.parked:
            names = " and ".join([", ".join(self.parked[:-1]), self.parked[-1]] if len(self.parked) > 1 else self.parked)
            ram += (f", {names} ({gb(self.parked_bytes)}) in RAM while the steps run "
                    "(on the device for samples), not counted here")
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



PROBE_NUMEL = 1 << 16  # a weight with more values is probed on fewer rows (its leading dimension), twice


def _probes(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], float]]:
    """The probes for a weight of `shape`, each with what its measured state is multiplied by:
    the shape itself up to PROBE_NUMEL values; else the shape with r and 2r rows (the leading
    dimension), whose states are extrapolated to all rows: the states optimizers keep are affine
    in the rows (full: rows x the rest; factored over the last two dimensions: rows + columns;
    a step count: constant), so two points give the line exactly."""
    numel = math.prod(shape)
    if numel <= PROBE_NUMEL or not shape:
        return [(shape, 1.0)]
    rest = numel // shape[0]
    r = max(1, PROBE_NUMEL // (2 * rest))
    ratio = shape[0] / r
    return [((r, *shape[1:]), 2.0 - ratio), ((2 * r, *shape[1:]), ratio - 1.0)]


def optimizer_state_bytes(optimizer_config: Any, trained: list[torch.Tensor]) -> tuple[int, str]:
    """Bytes of optimizer state for the `trained` weights, measured by one step of the configured
    optimizer (on CPU) on probes of each distinct shape (`_probes`), all in one optimizer.
    SD 1.5's UNet with Adafactor keeps 1.83 GB, where one 256 x 256 probe matrix said 0.03 (an
    H200 fine-tune's peak was 1.17x the plan). Falls back to Adam's two states per weight when the
    optimizer cannot run there. Returns the bytes and a note with the bytes per weight."""
    from .optimizers import create_optimizer  # noqa: PLC0415

    name = str(getattr(optimizer_config, "optimizer", "optimizer"))
    numel = sum(p.numel() for p in trained)
    dtype = trained[0].dtype if trained else torch.float32
    counts = Counter(tuple(p.shape) for p in trained)
    if not counts:
        return 0, f"{name}: nothing trained"
    generator = torch.Generator().manual_seed(0)
    probes = [(torch.nn.Parameter(torch.randn(probe, generator=generator, dtype=dtype) * 0.01), factor * counts[shape])
              for shape in counts for probe, factor in _probes(shape)]
    try:
        opt = create_optimizer([{"params": [p for p, _ in probes], "lr": 1e-4, "name": "probe"}], optimizer_config,
                               torch.device("cpu"))
        for p, _ in probes:
            p.grad = torch.randn(p.shape, generator=generator, dtype=dtype) * 0.01
        opt.step()
        total = 0.0
        seen: set[int] = set()
        for p, factor in probes:
            state = opt.state.get(p, {})
            size = 0
            for value in state.values() if isinstance(state, dict) else ():
                if isinstance(value, torch.Tensor) and value.untyped_storage()._cdata not in seen:
                    seen.add(value.untyped_storage()._cdata)
                    size += value.untyped_storage().nbytes()
            total += size * factor
    except Exception as err:  # noqa: BLE001 - e.g. a GPU-only kernel; the estimate goes on
        return 2 * trained[0].element_size() * numel, f"{name}: not measured on CPU ({type(err).__name__}), counted as Adam's two states"
    return int(total), f"{name}: {total / max(numel, 1):.1f} bytes per weight, measured"


def part_weights(model: Any) -> dict[str, tuple[str, int]]:
    """(dtypes, bytes) of each part and resident module (LTX-2's connectors: models/family.py)."""
    out: dict[str, tuple[str, int]] = {}
    seen: set[int] = set()
    modules = getattr(model, "resident", None) or model.parts
    for name, module in modules.items():
        size, dtypes = 0, set()
        for t in [*module.parameters(), *module.buffers()]:
            key = t.untyped_storage()._cdata if t.device.type != "meta" else id(t)
            if key in seen:
                continue
            seen.add(key)
            size += t.untyped_storage().nbytes() if t.device.type != "meta" else t.numel() * t.element_size()
            state = getattr(t, "quant_state", None)  # bitsandbytes' NF4 scales, beside the packed weight
            for absmax in (getattr(state, "absmax", None), getattr(getattr(state, "state2", None), "absmax", None)):
                size += absmax.nbytes if isinstance(absmax, torch.Tensor) else 0
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
               background: bool = False, parked: Iterable[str] = ()) -> PendingPlan:
    """The plan of a run whose model is loaded on `device` with the method's layers added.
    `checkpoint_parts` are the parts whose checkpointing the probes turn on and off (the others
    stay as they are); `measure` says which of the two probes to run. The weights, gradients,
    optimizer state and free memory are read here; the probes run in a thread of their own with
    `background` (see PendingPlan), else here. `parked`: the parts the trainer keeps in RAM while
    the steps run (placement.py)."""
    free_fn = free_fn or free_memory
    trained = [p for g in param_groups for p in g.params if p.requires_grad]
    weights = part_weights(model)
    grad_bytes = sum(p.numel() * p.element_size() for p in trained)
    opt_bytes, note = optimizer_state_bytes(config.optimizer, trained)
    if getattr(config.optimizer, "fused_back_pass", False) and getattr(config, "gradient_accumulation_steps", 1) <= 1:
        grad_bytes = max((p.numel() * p.element_size() for p in trained), default=0)  # one weight's at a time
    if getattr(config, "ema", "OFF") not in ("OFF", None) and str(config.ema) == "GPU":
        opt_bytes += sum(p.numel() * 4 for p in trained)
    held = held_bytes(device)
    overhead = max(0, held - sum(b for _, b in weights.values())) if device.type == "cpu" else max(0, held - torch.cuda.memory_allocated(device)) if device.type == "cuda" else 0
    free = free_fn(device)
    plan = MemoryPlan(str(device), weights, grad_bytes, opt_bytes, note, overhead, free=None if free is None else free + held,
                      parked=list(parked))
    if device.type != "cpu":  # layer offloading: those weights are in RAM (on CPU all of them are)
        from .offload import offloaded_bytes  # noqa: PLC0415

        plan.offloaded = offloaded_bytes(model, parked=plan.parked)  # a parked part is in RAM whole
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
             measure: tuple[bool, ...] = (False, True), free_fn: Callable[[torch.device], int | None] | None = None,
             parked: Iterable[str] = ()) -> MemoryPlan:
    """`start_plan`, probed here."""
    return start_plan(model, config, device, precision, param_groups, trained_text_parts, checkpoint_parts,
                      measure=measure, free_fn=free_fn, parked=parked).result()


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
                 free_fn: Callable[[torch.device], int | None] | None = None, background: bool = False,
                 parked: Iterable[str] = ()) -> None:
        self.settings = {part: GradientCheckpointing(value) for part, value in settings.items()}
        self.auto = [part for part, value in self.settings.items() if value == GradientCheckpointing.AUTO]
        self._args = (model, config, device, precision, param_groups, trained_text_parts, self.auto)
        self._free_fn = free_fn
        self._parked = list(parked)
        self._pending = (start_plan(*self._args, measure=(False,), free_fn=free_fn, background=background, parked=self._parked)
                         if self.auto else None)

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
                plan = plan_run(*self._args, free_fn=self._free_fn, parked=self._parked)
                on, reason = choose_checkpointing(plan)
            chosen.update(dict.fromkeys(self.auto, on))
        for part, on in chosen.items():
            set_checkpointing(model.parts[part], on)
        described = ", ".join(f"{part} {'on' if on else 'off'} ({'AUTO' if part in self.auto else 'set in the config'})"
                              for part, on in chosen.items())
        message = f"gradient checkpointing: {described or 'none (the training step runs no denoiser)'}" + (f"; {reason}" if reason else "")
        if plan is not None:
            message += f"; memory: {plan.breakdown(any(chosen[p] for p in self.auto))}"
        return chosen, message, plan


def decide_checkpointing(model: Any, config: Any, device: torch.device, precision: Any, param_groups: list[Any],
                         trained_text_parts: frozenset[str], settings: dict[str, Any],
                         free_fn: Callable[[torch.device], int | None] | None = None,
                         parked: Iterable[str] = ()) -> tuple[dict[str, bool], str, MemoryPlan | None]:
    """`CheckpointingDecision`, probed here."""
    return CheckpointingDecision(model, config, device, precision, param_groups, trained_text_parts, settings,
                                 free_fn, parked=parked).finish()


def estimate_line(config: Any) -> str:
    """`validate`'s line (see `estimate`)."""
    return estimate(config)["line"]


def estimate(config: Any) -> dict[str, Any]:
    """The model loaded as a run loads it (on the train device, the method's layers added), the
    plan and gradient checkpointing's choice: {"estimated": bool, "summary": 'peak ≈ ...: fits',
    "line": the summary with the choice and the breakdown}. Never raises: a model that cannot be
    loaded here gives 'not estimated' and why."""
    from ..config.families import family_info  # noqa: PLC0415
    from ..models.civitai_download import use_token as use_civitai_token  # noqa: PLC0415
    from ..models.common import base_model_source  # noqa: PLC0415
    from ..models.registry import get_family  # noqa: PLC0415
    from .device import Precision, resolve_device  # noqa: PLC0415
    from .diffusion import configure_model  # noqa: PLC0415
    from .fp16_fallback import part_load_dtypes  # noqa: PLC0415
    from .methods import get_method  # noqa: PLC0415
    from .placement import Placement  # noqa: PLC0415

    try:
        device, _ = resolve_device(config.train_device)
        precision = Precision(config.train_dtype, device, config.enable_autocast_cache)
        parts = family_info(config.model_type).parts
        family = get_family(config.model_type)
        dtypes = part_load_dtypes(config, family, parts, device, precision.dtype)
        # the parts' own files as the run loads them (a GGUF transformer counts its quantized bytes)
        hub = {"cache_dir": config.huggingface_cache_dir or None, "offline": config.offline_mode,
               "token": config.secrets.huggingface_token or None}
        use_civitai_token(config.secrets.civitai_token)
        model = family.load(base_model_source(config.base_model_name, **hub, model_type=config.model_type.value), dtypes=dtypes, **hub,
                            part_models={part: getattr(config, part).model_name for part in parts},
                            **({"excluded": excluded} if (excluded := excluded_parts(config)) else {}))  # include: false
        model.to(device)
        configure_model(model, config, device, precision)
        method = get_method(config.training_method)
        if method.step_parts is not None:  # the probe measures diffusion steps (the denoiser's)
            text = f"not estimated ({config.training_method.value}: the planner measures denoiser training steps only)"
            return {"estimated": False, "summary": text, "line": text}
        groups = method.setup(model, config, device)
        from .offload import install_offloading  # noqa: PLC0415

        install_offloading(model, config, device)  # as a run does: its weights in RAM are not counted on the device
        parked = Placement.for_run(model, config, device, groups, method.embeddings is not None).parked
        text = frozenset(g.model_part for g in groups if g.model_part in model.text_encoder_names and g.trains)
        settings = {part: getattr(config, part).gradient_checkpointing for part in (model.denoiser, *sorted(text))}
        chosen, message, plan = decide_checkpointing(model, config, device, precision, groups, text, settings, parked=parked)
        on = chosen[model.denoiser]
        if plan is not None:  # AUTO: the message has the plan's line and breakdown
            on = any(chosen[p] for p in settings if GradientCheckpointing(settings[p]) == GradientCheckpointing.AUTO)
            return {"estimated": plan.peak(on) is not None, "summary": plan.line(on), "line": message}
        plan = plan_run(model, config, device, precision, groups, text, [], measure=(on,), parked=parked)  # explicit: as set
        line = f"{plan.line(on)}; {message}; memory: {plan.breakdown(on)}"
        return {"estimated": plan.peak(on) is not None, "summary": plan.line(on), "line": line}
    except Exception as err:  # noqa: BLE001 - validate goes on without the estimate
        text = f"not estimated ({type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''})"
        return {"estimated": False, "summary": text, "line": text}


__all__ = [
    "MARGIN", "CheckpointingDecision", "LiveBytes", "MemoryPlan", "PendingPlan", "choose_checkpointing", "decide_checkpointing", "estimate", "estimate_line", "free_memory", "measure_step", "on_meta",
    "optimizer_state_bytes", "plan_run", "prepare_probe", "set_checkpointing", "start_plan",
]
