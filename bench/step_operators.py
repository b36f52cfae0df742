"""What a GPU launches in one training step, counted on the CPU: the operators of a full-size step.

    python bench/step_operators.py [--run sd15-lora-b1] [--narrow] [--resolution 64] [--steps 3] [--top 25]
                                   [--work DIR] [--set KEY=VALUE ...]

A small-batch step on a fast card is bound by the CPU that launches its kernels, not by the card
(section 17 of docs/PERFORMANCE.md: SD 1.5 LoRA at batch 1 on an H200 keeps the GPU busy 62 ms of
154), so the number of operators a step runs is its cost there. This runs one of gpu_check's runs
(the same preset and changes, the full-size model with random weights, through the Trainer) on
the CPU with the GPU's data types (tests/gpu_types.as_on_a_gpu: 16-bit weights, a float16 autocast,
layer and group norms in float32 as CUDA's autocast runs them) at a small resolution (the count does
not depend on it), and counts every operator of the last `--steps` steps at the dispatcher (views,
which launch nothing, apart). `--narrow` (SD 1.5, SDXL): every block, layer and attention of the
UNet and text encoders at 32-64 channels, the same operators in seconds.

Prints the operators a step, the ones that are casts (`_to_copy`), the busiest operators, and this
machine's CPU time of a step (its 16-bit kernels are slow: not what a GPU box's CPU pays). A proxy:
the CPU's kernels are not all the GPU's (its attention, its fused optimizer), so it counted 4,592
where an H200's profile saw 3,601 launches; it tells what a change to the step removes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import bench._common  # noqa: E402, F401  (sets the offline environment)

# operators that only describe existing memory anew: no kernel
VIEWS = frozenset({"view", "_unsafe_view", "t", "transpose", "reshape", "as_strided", "expand", "permute", "unsqueeze",
                   "squeeze", "slice", "select", "detach", "alias", "split", "split_with_sizes", "unbind", "_reshape_alias",
                   "lift_fresh", "_has_compatible_shallow_copy_type", "is_same_size"})


class OperatorCount:
    """Counts, per operator name, what runs at the dispatcher while on (backward included: the
    autograd engine runs a CPU graph's backward on the calling thread)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        self.counts: Counter[str] = Counter()
        counts = self.counts

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.overloadpacket.__name__
                if name not in VIEWS:
                    counts[name] += 1
                return func(*args, **(kwargs or {}))

        self._mode = Mode()

    def __enter__(self) -> OperatorCount:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)


NARROW_CHANNELS = (32, 64, 64, 64)  # --narrow: the UNet's widths (SD 1.5 / SDXL: 320, 640, 1280[, 1280])
NARROW_TEXT = 64  # and the text encoders' (768, 1280)


def narrow_model(name: str, work: Path) -> Path:
    """SD 1.5 / SDXL with every block, layer and attention of the published UNet and text encoders
    but 32-64 numbers wide (`--narrow`): the same operators as the full model, each on a few
    numbers, so a step's CPU time is what launching them costs."""
    from bench import gpu
    from bench.gpu_check_models import full_size_model

    if name not in ("sd15", "sdxl"):
        raise SystemExit(f"--narrow: only the UNet models (sd15, sdxl), not {name}")
    saved = {key: getattr(gpu, key) for key in ("FAMILIES", "CLIP_L", "CLIP_BIG_G")}
    unet = gpu.FAMILIES[name]["unet"]
    channels = NARROW_CHANNELS[:len(unet["block_out_channels"])]
    narrowed = {**unet, "block_out_channels": channels}
    if isinstance(unet["attention_head_dim"], (list, tuple)):  # SDXL: heads 64 wide; SD 1.5: 8 heads of any width
        narrowed["attention_head_dim"] = tuple(max(1, c // 64) for c in channels)
    text = {"hidden_size": NARROW_TEXT, "intermediate_size": 4 * NARROW_TEXT, "num_attention_heads": 4, "projection_dim": NARROW_TEXT}
    if name == "sdxl":  # the two encoders' states side by side; the pooled one beside six 256-wide time embeddings
        narrowed.update(cross_attention_dim=2 * NARROW_TEXT, projection_class_embeddings_input_dim=NARROW_TEXT + 6 * 256)
    else:
        narrowed["cross_attention_dim"] = NARROW_TEXT
    gpu.FAMILIES = {**gpu.FAMILIES, name: {**gpu.FAMILIES[name], "unet": narrowed}}
    gpu.CLIP_L, gpu.CLIP_BIG_G = {**gpu.CLIP_L, **text}, {**gpu.CLIP_BIG_G, **text}
    try:
        return full_size_model(name, work / "narrow", "cpu")
    finally:
        for key, value in saved.items():
            setattr(gpu, key, value)


def count_steps(run_name: str, work: Path, resolution: int, steps: int, warmup: int = 1,
                overrides: list[str] | None = None, narrow: bool = False) -> dict:
    """Trains gpu_check's run `run_name` at full size on the CPU as on a GPU for `warmup + steps`
    steps; returns the operators of the last `steps` (per step), and the median CPU seconds of a
    step without the counting."""
    from bench.gpu_check import RUNS, Collect, fixed_noise, one_image_folder, parse_set, run_config
    from bench.gpu_check_models import full_size_model
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import RunPaths, Trainer
    from tests.gpu_types import as_on_a_gpu

    run = next(r for r in RUNS if r.name == run_name)
    base = narrow_model(run.model, work) if narrow else full_size_model(run.model, work, "cpu")
    data = one_image_folder(work / run.name / "data", run.batch, resolution)
    timed = warmup + steps
    config = run_config(run, str(base), data, work / run.name, "cpu", timed + steps, resolution, 1e-4, parse_set(overrides or []))
    counter = OperatorCount()
    times: list[float] = []
    with as_on_a_gpu():
        trainer = Trainer(load_config(config).config, RunPaths(work / "samples", work / "backup", work / "save", None, []),
                          Collect(), noise_fn=fixed_noise)
        trainer.setup()
        forward_backward, optimizer_step = trainer._forward_backward, trainer._optimizer_step
        started: list[float] = []

        def counted_forward_backward(batch, accum):
            started.append(time.perf_counter())
            if len(started) > timed:  # the counted steps come after the timed ones (counting slows a step)
                counter.__enter__()
            return forward_backward(batch, accum)

        def counted_step() -> None:
            optimizer_step()
            if len(started) > timed:
                counter.__exit__(None, None, None)
            elif len(started) > warmup:
                times.append(time.perf_counter() - started[-1])

        trainer._forward_backward, trainer._optimizer_step = counted_forward_backward, counted_step
        status = trainer.train()
    if status != "done":
        raise RuntimeError(f"the run ended '{status}'")
    per_step = {name: n / steps for name, n in counter.counts.items()}
    return {"run": run_name, "operators": sum(per_step.values()), "casts": per_step.get("_to_copy", 0.0),
            "by_name": dict(sorted(per_step.items(), key=lambda kv: -kv[1])), "cpu_s_per_step": statistics.median(times)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", default="sd15-lora-b1", help="a run of bench/gpu_check.py (default sd15-lora-b1)")
    parser.add_argument("--resolution", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3, help="steps timed, then as many counted (after one warm-up)")
    parser.add_argument("--top", type=int, default=25, help="the busiest operators printed")
    parser.add_argument("--work", type=Path, default=None, help="where the model is built once (default: a temp folder)")
    parser.add_argument("--narrow", action="store_true", help="the UNet's every layer at 32-64 channels: the same "
                                                                "operators, so the CPU time is their launching")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config option over the run's own")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="step-operators-"))
    result = count_steps(args.run, work, args.resolution, args.steps, overrides=args.set, narrow=args.narrow)
    print(f"{result['run']}{' (narrow)' if args.narrow else ''} at {args.resolution} px on the CPU as on a GPU: {result['operators']:.0f} operators a step "
          f"({result['casts']:.0f} casts); CPU {result['cpu_s_per_step']:.3f} s a step")
    for name, n in list(result["by_name"].items())[:args.top]:
        print(f"  {n:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
