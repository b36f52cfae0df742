"""One command that checks a GPU box end to end: full-size training runs through the real trainer.

    python bench/gpu_check.py [--only NAME[,NAME]] [--budget-s S] [--steps 30] [--warmup 3] [--profile NAME[,NAME]]
                              [--out DIR] [--work DIR] [--device cuda] [--tiny | --shallow] [--set KEY=VALUE ...]

Each run builds its model at full size with random weights from the published configs
(bench/gpu_check_models.py: nothing is downloaded), trains it through the Trainer with a config
made from our preset for the family (what `python -m ot_gradio train` runs), on one fixed image
with fixed noise and timestep, so the loss must fall as it overfits, and reports:
s/step (median after the warm-up), images/s, the peak `torch.cuda.max_memory_allocated` of the
steps against the memory planner's estimate (the plan the trainer made in `setup`, the same
planner `python -m ot_gradio estimate-memory` prints), the first and last losses, that the saved
LoRA reloads in the family's diffusers pipeline (`load_lora_weights`, no unexpected key) and,
for the sampling runs, the seconds per sample and that the image is not NaN/black.

The runs (RUNS below; `--only` picks some by name): SD 1.5 LoRA 512 px batch 1 and 4, SD 1.5
fine-tune (Adafactor, fused back pass, EMA on the GPU), SDXL LoRA 1024 px with a sample, Flux.1
dev LoRA 512 px (NF4 transformer and T5, the flux-dev-1-lora preset) with a sample, the same with
a BFLOAT_16 transformer (its losses compared with NF4's on the same fixed batch), Z-Image LoRA
with a FLOAT_8 transformer with and without `offload_fraction` 0.5 + activation offloading (step
time of both, bytes moved to the card per step), and with INT_W8A8 / FLOAT_W8A8 transformers (8-bit
matmuls; step time and losses against FLOAT_8's). Each run is tried on its own: a failure is
recorded with its error and the next run starts; `--budget-s` starts no run after that many
seconds. Writes gpu_check.json and gpu_check.md to `--out` (default: a temp folder), prints the
table, exits 1 when any run failed (its error printed), 3 when all that ran passed but the budget
left some not started, 2 without a CUDA GPU (without --tiny).

`--tiny`: the same runs through the same code (built, saved as a diffusers folder, loaded by the
trainer, reloaded by diffusers) with the tiny models of ot_gradio.models.tiny instead of the
full-size ones, on the CPU at 64 px for a few steps: checks the script, makes no timing claim
(the test suite runs it).

`--shallow`: the full-width models with two blocks of each kind (bench/gpu_check_models.py
SHALLOW): every layer shape and kernel of the full model, built and quantized in a fraction of
the time, for a first look on a GPU or a failure's traceback (run it with CUDA_LAUNCH_BLOCKING=1
to have the failing kernel's call in it). Its step times and peaks are not the full model's.

`--set KEY=VALUE` (repeatable): a config option of every run chosen, over the run's own, to tell
which setting a failure follows: `--set transformer.gradient_checkpointing=ON`. KEY is the option's
name in the saved config (a dotted path into a section); VALUE is read as JSON where it parses
(1e-4, true, "ON"), else as the string.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import make_images  # noqa: E402  (also sets the offline environment)
from bench.gpu_check_report import compare, profile_activities, write_profile, write_report  # noqa: E402
from ot_gradio.training.run_state import Reporter  # noqa: E402

FIXED_TIMESTEP = 500  # of 1000: the same noise and timestep every step, so the loss measures the fit alone


@dataclass(frozen=True)
class Run:
    name: str
    model: str  # gpu_check_models.BUILDERS key; `tiny:<model>` with --tiny
    preset: str
    resolution: int
    batch: int = 1
    changes: dict[str, Any] = field(default_factory=dict)  # over the preset (nested sections merged)
    sample: bool = False
    compare_with: str = ""  # another run: the losses on the same fixed batch are compared
    lora: bool = True


RUNS = [
    Run("sd15-lora-b1", "sd15", "sd15-lora", 512),
    Run("sd15-lora-b4", "sd15", "sd15-lora", 512, batch=4),
    # the steps after the text encoder stops training (the preset's epochs 31 to 100): its outputs kept in RAM by caption
    Run("sd15-lora-b1-te-stopped", "sd15", "sd15-lora", 512,
        changes={"text_encoder": {"stop_training_after": 1, "stop_training_after_unit": "STEP"}}),
    # BFLOAT_16: the fused back pass cannot unscale FLOAT_16 gradients (the doctor says so)
    Run("sd15-finetune", "sd15", "sd15-finetune", 512, lora=False, changes={
        "optimizer": {"optimizer": "ADAFACTOR", "fused_back_pass": True}, "ema": "GPU", "learning_rate": 1e-5,
        "train_dtype": "BFLOAT_16"}),
    Run("sdxl-lora", "sdxl", "sdxl-lora", 1024, sample=True),
    Run("flux-lora-nf4", "flux", "flux-dev-1-lora", 512, sample=True),
    Run("flux-lora-bf16", "flux", "flux-dev-1-lora", 512, changes={"transformer": {"weight_dtype": "BFLOAT_16"}},
        compare_with="flux-lora-nf4"),
    # gradient checkpointing ON as on the small cards offloading is for (AUTO turns it off on a big one):
    # the offloaded blocks' own checkpointing then runs inside diffusers' per-block one
    Run("z-image-lora-fp8-offload", "z-image", "z-image-lora", 512,
        changes={"transformer": {"offload_fraction": 0.5, "activation_offloading": True, "gradient_checkpointing": "ON"}}),
    Run("z-image-lora-fp8", "z-image", "z-image-lora", 512,
        changes={"transformer": {"offload_fraction": 0.0, "activation_offloading": False}}, compare_with="z-image-lora-fp8-offload"),
    # 8-bit matmuls (torch._int_mm / torch._scaled_mm) against FLOAT_8's expanded weights: speed and loss on the same batch
    Run("z-image-lora-int-w8a8", "z-image", "z-image-lora", 512,
        changes={"transformer": {"weight_dtype": "INT_W8A8", "offload_fraction": 0.0, "activation_offloading": False}},
        compare_with="z-image-lora-fp8"),
    Run("z-image-lora-float-w8a8", "z-image", "z-image-lora", 512,
        changes={"transformer": {"weight_dtype": "FLOAT_W8A8", "offload_fraction": 0.0, "activation_offloading": False}},
        compare_with="z-image-lora-fp8"),
    # `compile` (torch.compile of the UNet; with --tiny dynamo's eager backend: the trace, not inductor), last: its
    # first steps wait while inductor compiles
    Run("sd15-lora-b1-compile", "sd15", "sd15-lora", 512, changes={"compile": True}, compare_with="sd15-lora-b1"),
]
PIPELINES = {"sd15": "StableDiffusionPipeline", "sdxl": "StableDiffusionXLPipeline", "flux": "FluxPipeline", "z-image": "ZImagePipeline"}
# the parts a LoRA of the run does not touch are not loaded for the reload check (a full-size T5 costs 10 GB)
UNUSED_FOR_RELOAD = {"flux": ("text_encoder", "text_encoder_2", "vae"), "z-image": ("text_encoder", "vae")}
PROFILE_STEPS = 3  # --profile: steps after the timed ones under torch.profiler (not in the timings)


class Collect(Reporter):
    def __init__(self) -> None:
        self.losses: list[float] = []
        self.warnings: list[str] = []
        self.samples: list[tuple[str, float]] = []  # (path, seconds since sampling started)
        self.saved_paths: list[str] = []
        self._sampling_since: float | None = None

    def status(self, status: str, message: str = "") -> None:
        if status == "sampling":
            self._sampling_since = time.perf_counter()

    def warning(self, message: str) -> None:
        self.warnings.append(message)

    def metrics(self, **fields: Any) -> None:
        if "loss" in fields:
            self.losses.append(float(fields["loss"]))

    def sample(self, **fields: Any) -> None:
        now = time.perf_counter()
        self.samples.append((fields["path"], now - (self._sampling_since or now)))
        self._sampling_since = now

    def saved(self, path: str, kind: str = "model") -> None:  # type: ignore[override]
        if kind == "model":
            self.saved_paths.append(path)


def fixed_noise(latents):
    """The same noise for every item of the batch and every step, at one timestep: the batch's
    loss then depends on the weights alone (not on the order the items come in)."""
    import torch

    noise = torch.randn((1, *latents.shape[1:]), generator=torch.Generator().manual_seed(1234))
    return noise.expand(latents.shape).contiguous(), torch.full((latents.shape[0],), FIXED_TIMESTEP)


def parse_set(items: list[str]) -> dict[str, Any]:
    """`--set` items as nested changes: ["transformer.gradient_checkpointing=ON"] ->
    {"transformer": {"gradient_checkpointing": "ON"}}."""
    changes: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: write KEY=VALUE, e.g. transformer.gradient_checkpointing=ON")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        *sections, name = key.split(".")
        target = changes
        for section in sections:
            target = target.setdefault(section, {})
        target[name] = value
    return changes


def merge(config: dict[str, Any], changes: dict[str, Any]) -> None:
    """`changes` over `config`, sections merged key by key."""
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merge(config[key], value)
        else:
            config[key] = value


def run_config(run: Run, base_model: str, data: Path, work: Path, device: str, steps: int, resolution: int,
               lora_lr: float, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Our preset for the family with the run's changes, on one fixed image (`batch` copies of it,
    so one epoch is one step) for `steps` epochs; no backups, samples only where the run asks.
    A LoRA trains at `lora_lr` (the learning rate changes no step's cost; the presets' 3e-4 with
    alpha 1 moves a loss too little in 30 steps to tell a fit from rounding)."""
    from ot_gradio.config.io import config_to_dict
    from ot_gradio.config.presets import apply_preset, load_preset
    from ot_gradio.config.schema import TrainConfig

    config = apply_preset(config_to_dict(TrainConfig()), load_preset(run.preset))
    merge(config, run.changes)
    suffix = Path(config["output_model_destination"]).suffix or ".safetensors"
    config.update(
        base_model_name=base_model, train_device=device, resolution=str(resolution), batch_size=run.batch, epochs=steps,
        concepts=[{"name": "one image", "path": str(data)}], workspace_dir=str(work / "ws"), cache_dir=str(work / "cache"),
        output_model_destination=str(work / "out" / f"{run.name}{suffix}"), learning_rate_warmup_steps=0,
        learning_rate=lora_lr if run.lora else config["learning_rate"],
        backup_after_unit="NEVER", save_every_unit="NEVER", sample_after_unit="NEVER", tensorboard=False,
        samples=[{"prompt": "a red circle on a light background", "height": resolution, "width": resolution,
                  "diffusion_steps": 20 if device != "cpu" else 2, "cfg_scale": 3.5}] if run.sample else [],
    )
    merge(config, overrides or {})
    return config


def one_image_folder(folder: Path, copies: int, resolution: int) -> Path:
    """`copies` copies of one image and caption (a batch of the same picture: overfitting it is the check)."""
    source = make_images(folder / "source", 1, size=resolution)
    data = folder / f"one-x{copies}"
    data.mkdir(parents=True, exist_ok=True)
    for i in range(copies):
        for suffix in (".png", ".txt"):
            shutil.copy(source / f"00000{suffix}", data / f"{i:03d}{suffix}")
    return data


class MovedBytes:
    """Counts the bytes layer offloading moves to the card (OffloadedBlock.load) while on."""

    def __init__(self) -> None:
        from ot_gradio.training.offload import OffloadedBlock

        self.total = 0
        self._cls, self._load = OffloadedBlock, OffloadedBlock.load
        counter = self

        def load(block) -> None:
            counter.total += block.nbytes
            counter._load(block)

        OffloadedBlock.load = load

    def close(self) -> None:
        self._cls.load = self._load


def train_run(run: Run, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch

    from bench.gpu_check_models import full_size_model
    from ot_gradio.config.io import load_config
    from ot_gradio.training.memory_plan import plan_run
    from ot_gradio.training.offload import offloaded_bytes
    from ot_gradio.training.trainer import RunPaths, Trainer

    base_model = str(full_size_model(run.model, args.work, args.device, tiny=args.tiny, shallow=args.shallow))
    resolution = 64 if args.tiny else run.resolution
    data = one_image_folder(work / "data", run.batch, resolution)
    profiled = run.name in args.profile
    steps = args.warmup + args.steps + (PROFILE_STEPS if profiled else 0)
    config = run_config(run, base_model, data, work, args.device, steps, resolution, args.lora_lr, parse_set(args.set))
    (work / "config.json").write_text(json.dumps(config, indent=1))
    cuda = args.device.startswith("cuda") and torch.cuda.is_available()
    # what earlier runs left on the card (a leak shows here, and in this run's peak)
    left_gb = torch.cuda.memory_allocated() / 1e9 if cuda else None
    report = Collect()
    if args.tiny and config.get("compile"):  # inductor compiles a UNet on a CPU for minutes: the trace is checked
        import functools

        torch.compile = functools.partial(torch.compile, backend="eager")
    trainer = Trainer(load_config(config).config, RunPaths(work / "samples", work / "backup", work / "save", None, []), report,
                      noise_fn=fixed_noise)
    t0 = time.perf_counter()
    trainer.setup()
    setup_s = time.perf_counter() - t0
    if cuda:  # the steps' peak (loading and caching latents have their own, which the planner does not estimate)
        torch.cuda.reset_peak_memory_stats()
    denoiser = trainer.model.denoiser
    on = trainer.checkpointing.get(denoiser, False)
    if trainer.memory_plan is None and cuda:
        # gradient checkpointing set ON or OFF: the trainer made no plan. Asked here, after setup, the
        # planner would count as held what the allocator keeps cached from caching latents and text
        # (the Z-Image offloading run: 14.1 GB planned against 4.8 measured); the trainer plans before that
        torch.cuda.empty_cache()
    plan = trainer.memory_plan or plan_run(trainer.model, trainer.config, trainer.device, trainer.precision, trainer.param_groups,
                                           trainer.trained_text_parts, [denoiser], measure=(on,), parked=trainer.placement.parked)
    estimate = plan.peak(on)
    ends: list[float] = []
    peaks: list[int] = []
    moved = MovedBytes()
    moved_at: list[int] = []
    starts: list[float] = []
    # emptied after training: the trainer must be freed before the reload
    original = [trainer._optimizer_step, trainer._forward_backward]

    profiler: list[Any] = []

    def forward_backward(batch, accum):  # each optimizer step is one batch here (no accumulation)
        if profiled and len(starts) == args.warmup + args.steps:  # after the timed steps
            profiler.append(torch.profiler.profile(activities=profile_activities(cuda)))
            profiler[0].__enter__()
        starts.append(time.perf_counter())  # the device is idle: the last step ended synchronized
        return original[1](batch, accum)

    def step_and_sync() -> None:  # time what the device did, not what was queued
        original[0]()
        if cuda:
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated())
        ends.append(time.perf_counter())
        moved_at.append(moved.total)
        if profiler and len(ends) == steps:
            profiler[0].__exit__(None, None, None)

    trainer._optimizer_step = step_and_sync
    trainer._forward_backward = forward_backward
    try:
        status = trainer.train()
    finally:
        moved.close()
    # the step: forward, backward and optimizer; the wall: from one step's end to the next (with the
    # data loading and, as each epoch is one step here, the epoch's bookkeeping)
    timed = args.warmup + args.steps
    step_s = [b - a for a, b in zip(starts[args.warmup:timed], ends[args.warmup:timed], strict=True)]
    wall_s = [b - a for a, b in zip(ends[args.warmup - 1 if args.warmup else 0:timed - 1], ends[args.warmup or 1:timed], strict=True)]
    moved_per_step = [b - a for a, b in zip(moved_at[:-1], moved_at[1:], strict=True)]
    result: dict[str, Any] = {
        "status": status, "setup_s": setup_s, "left_by_earlier_runs_gb": left_gb, "steps": len(report.losses), "timed_steps": len(step_s),
        "s_per_step": statistics.median(step_s) if step_s else None,
        "s_per_step_wall": statistics.median(wall_s) if wall_s else None,
        "peak_gb": peaks[-1] / 1e9 if peaks else None, "estimate_gb": estimate / 1e9 if estimate is not None else None,
        "gradient_checkpointing": on, "losses": report.losses,
        "offloaded_gb": offloaded_bytes(trainer.model) / 1e9,
        "moved_gb_per_step": statistics.median(moved_per_step) / 1e9 if moved_per_step and moved.total else 0.0,
    }
    result["images_per_s"] = run.batch / result["s_per_step"] if result["s_per_step"] else None
    if profiler:
        result["profile"] = write_profile(profiler[0], args.out / f"profile-{run.name}.txt", PROFILE_STEPS)
    if result["peak_gb"] and result["estimate_gb"]:
        result["peak_vs_estimate"] = result["peak_gb"] / result["estimate_gb"]
    saved = report.saved_paths[-1] if report.saved_paths else ""
    result["saved"] = saved
    result["warnings"] = report.warnings[:20]  # what the trainer warned of (precision notes, ignored options)
    if report.samples:
        result["sample_s"], result["sample_check"] = report.samples[-1][1], image_problem(report.samples[-1][0])
    result.update(step_flops(trainer, args, result["s_per_step"]))
    original.clear()
    del trainer
    free_device(cuda)
    problems = []
    losses = report.losses
    if status != "done":
        problems.append(f"the run ended '{status}'")
    if not losses or not all(math.isfinite(x) for x in losses):
        problems.append(f"a loss is not finite: {losses}")
    elif not falls(losses):
        problems.append(f"the loss did not fall while overfitting one image: first {losses[:3]}, last {losses[-3:]}")
    if run.sample and not report.samples:
        problems.append("no sample was made")
    if result.get("sample_check"):
        problems.append(f"sample: {result['sample_check']}")
    if not saved or not Path(saved).is_file():
        problems.append("no model file was saved")
    elif run.lora:
        t1 = time.perf_counter()
        reload = lora_reload_problems(run.model, base_model, Path(saved), args.device if cuda else "cpu")
        result["reload_s"] = time.perf_counter() - t1
        result["reload"] = "ok" if not reload else "; ".join(reload)
        problems += [f"LoRA reload: {p}" for p in reload]
        free_device(cuda)
    result["problems"] = problems
    return result


def step_flops(trainer, args: argparse.Namespace, s_per_step: float | None) -> dict[str, Any]:
    """TFLOPs of one real step (bench/gpu.py's count: one more forward and backward, counted by
    torch's FlopCounterMode; bitsandbytes' 4-bit matmuls are not counted) and the MFU against the
    card's dense 16-bit peak. Not a check: a failure to count leaves them out."""
    import torch

    from bench.gpu import count_step_flops, peak_for

    try:
        flops = count_step_flops(trainer)
    except Exception as err:  # noqa: BLE001 - a figure, not a check
        return {"flops_note": f"not counted: {type(err).__name__}: {str(err)[:200]}"}
    out: dict[str, Any] = {"tflops_per_step": flops / 1e12}
    peak = peak_for(torch.cuda.get_device_name()) if args.device.startswith("cuda") and torch.cuda.is_available() else None
    if peak and s_per_step:
        out["mfu"] = flops / s_per_step / 1e12 / peak
    return out


def falls(losses: list[float]) -> bool:
    """The mean of the last three losses is below the mean of the first three."""
    k = min(3, len(losses) // 2) or 1
    return sum(losses[-k:]) / k < sum(losses[:k]) / k


def image_problem(path: str) -> str:
    """'' for a usable sample; else what is wrong with it (NaN decodes to black)."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(path).convert("RGB"), dtype=np.float32)
    if not np.isfinite(pixels).all():
        return "not finite"
    if pixels.max() <= 2:
        return "black (NaN or overflow in the pipeline)"
    if pixels.std() == 0:
        return f"one flat colour {pixels[0, 0].tolist()}"
    return ""


def lora_reload_problems(model: str, base_model: str, path: Path, device: str) -> list[str]:
    """What the family's diffusers pipeline says loading the LoRA (warnings, unexpected or
    unloaded keys, errors); [] when it loads cleanly."""
    import logging
    import warnings

    import diffusers
    import torch

    folder = Path(base_model)
    pipeline_class = getattr(diffusers, PIPELINES[model])
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    pipe = pipeline_class.from_pretrained(str(folder), dtype=dtype, local_files_only=True,
                                          **dict.fromkeys(UNUSED_FOR_RELOAD.get(model, ()), None))
    pipe.to(device)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    loggers = [logging.getLogger(name) for name in ("diffusers", "peft")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe.load_lora_weights(str(path))
    except Exception as err:  # noqa: BLE001 - reported as the run's problem
        return [f"{type(err).__name__}: {err}"]
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    loaded = [n for n, _ in pipe.components.items() if getattr(getattr(pipe, n, None), "peft_config", None)]
    problems = [r.getMessage()[:300] for r in records]
    problems += [str(w.message)[:300] for w in caught if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    if not loaded:
        problems.append("no part of the pipeline took the LoRA")
    del pipe
    return problems


def free_device(cuda: bool) -> None:
    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def run_in_child(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    """`run` in a process of its own (`--isolate`): a CUDA error such as an illegal memory access
    ends the CUDA context of its process, and with it every later run of that process. The child
    writes its result under `--out`/runs/NAME; the models stay in `--work` for the next runs."""
    folder = args.out / "runs" / run.name
    command = [sys.executable, str(Path(__file__).resolve()), "--only", run.name, "--out", str(folder), "--work", str(args.work),
               "--device", args.device, "--steps", str(args.steps), "--warmup", str(args.warmup), "--lora-lr", str(args.lora_lr),
               "--in-process", *(["--tiny"] if args.tiny else []), *(["--shallow"] if args.shallow else []),
               *(["--profile", run.name] if run.name in args.profile else []), *(f"--set={item}" for item in args.set)]
    code = subprocess.run(command, check=False).returncode
    try:
        result = json.loads((folder / "gpu_check.json").read_text())["runs"][run.name]
    except (OSError, KeyError, ValueError):
        return {"problems": [f"its process ended with exit status {code} before writing a result (its output is above)"]}
    if result.get("profile"):  # beside gpu_check.json, where the run's own folder is too deep for some copiers
        shutil.copy(folder / result["profile"]["file"], args.out / result["profile"]["file"])
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated run names (default: all): " + ", ".join(r.name for r in RUNS))
    parser.add_argument("--budget-s", type=float, default=float("inf"), help="start no run after this many seconds (default: no limit)")
    parser.add_argument("--steps", type=int, help="steps after the warm-up (default 30; 4 with --tiny)")
    parser.add_argument("--warmup", type=int, help="steps before the timed ones (default 3; 1 with --tiny)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--lora-lr", type=float, help="the LoRA runs' learning rate (default 1e-3; 1e-2 with --tiny)")
    parser.add_argument("--profile", default="", help="comma-separated run names to profile: 3 more steps after the timed ones "
                                                      "under torch.profiler, their operators written to --out as profile-NAME.txt")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--tiny", action="store_true", help="tiny models on the CPU: checks the script, no timing claim")
    size.add_argument("--shallow", action="store_true", help="full-width models with two blocks of each kind: every layer shape "
                                                             "and kernel of the full model in a fraction of the time (figures not comparable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config option of every run, over the run's own (repeatable): transformer.gradient_checkpointing=ON")
    isolation = parser.add_mutually_exclusive_group()
    isolation.add_argument("--isolate", action="store_true", default=None,
                           help="each run in a process of its own (the default on a GPU with several runs: a CUDA error "
                                "ends its process's CUDA context, and would end every later run with it)")
    isolation.add_argument("--in-process", dest="isolate", action="store_false", help="all runs in this process (the default with --tiny)")
    parser.add_argument("--out", type=Path, help="where gpu_check.json and gpu_check.md go (default: a temp folder)")
    parser.add_argument("--work", type=Path, help="models, data and runs (default: a temp folder; full-size models are "
                                                  "deleted after their last run unless this is given)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.device = "cpu"
    args.steps = args.steps if args.steps is not None else (4 if args.tiny else 30)
    args.lora_lr = args.lora_lr or (1e-2 if args.tiny else 1e-3)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 3)
    known = {r.name for r in RUNS}
    args.runs = [r for r in RUNS if not args.only or r.name in args.only.split(",")]
    if args.isolate is None:
        args.isolate = not args.tiny and len(args.runs) > 1
    args.profile = {n for n in args.profile.split(",") if n}
    unknown = [n for n in [*args.only.split(","), *args.profile] if n and n not in known]
    if unknown:
        parser.error(f"--only / --profile: unknown run(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        parse_set(args.set)
    except ValueError as err:
        parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from bench._common import setup_torch
    from bench.gpu_check_models import model_folder

    setup_torch(1 if args.tiny else torch.get_num_threads())
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here (torch.cuda.is_available() is False); run with --tiny to check the script on the CPU")
        return 2
    keep_models = args.work is not None
    args.work = args.work or Path(tempfile.mkdtemp(prefix="ot-gpu-check-"))
    out = args.out = args.out or Path(tempfile.mkdtemp(prefix="ot-gpu-check-out-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for index, run in enumerate(args.runs):
        if time.perf_counter() - started > args.budget_s:
            results[run.name] = {"ok": False, "skipped": True, "problems": [f"not started: --budget-s {args.budget_s:g} spent"]}
            continue
        print(f"gpu_check: {run.name} ...", flush=True)
        t0 = time.perf_counter()
        if args.isolate:
            result = run_in_child(run, args)
        else:
            try:
                result = train_run(run, args, args.work / "runs" / run.name)
            except Exception as err:  # noqa: BLE001 - recorded; the next run starts
                traceback.print_exc()
                result = {"problems": [f"{type(err).__name__}: {str(err)[:1000]}"], "error": traceback.format_exc()[-4000:]}
            free_device(torch.cuda.is_available())  # here: the error's frames (and the trainer they hold) are gone
        result["wall_s"] = time.perf_counter() - t0
        results[run.name] = result
        if not keep_models and all(r.model != run.model for r in args.runs[index + 1:]):
            shutil.rmtree(model_folder(args.work, run.model, args.tiny, args.shallow), ignore_errors=True)  # a full-size model: up to 35 GB of disk
        print(f"gpu_check: {run.name}: {'; '.join(result['problems']) or 'ok'} ({result['wall_s']:.0f} s)", flush=True)
        write_report(out, args, results, started, final=False)  # a command killed at its time limit leaves what ran
    if not keep_models:
        shutil.rmtree(args.work, ignore_errors=True)
    compare(RUNS, results)
    report, markdown = write_report(out, args, results, started, final=True)
    print(markdown)
    failed = [name for name, r in results.items() if not r["ok"] and not r.get("skipped")]
    skipped = [name for name, r in results.items() if r.get("skipped")]
    for name in failed:
        print(f"FAILED {name}: {'; '.join(results[name].get('problems', []))}")
    if skipped:
        print(f"NOT STARTED (--budget-s spent): {', '.join(skipped)}; run them with --only {','.join(skipped)}")
    ok = len(results) - len(failed) - len(skipped)
    print(f"gpu_check: results in {out}; {ok} of {len(results)} runs ok in {report['total_s']:.0f} s", flush=True)
    return 1 if failed else 3 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
