"""The CPU time a LoRA step costs beyond its kernels: what a GPU box's CPU pays to launch one.

    .venv/bin/python bench/step_cpu_time.py [--steps 300] [--threads 1] [--half]

A small-batch step on a fast card waits on the CPU that launches its kernels (docs/PERFORMANCE.md
§17: SD 1.5 LoRA at batch 1 on an H200 keeps the GPU busy 62 ms of 154), and that CPU time is the
Python, the dispatcher and autograd of every operation and module call, not only the launches
(bench/step_operators.py counts those). This times the training step's own forward and backward
code on the tiny SD 1.5 UNet (every block kind, 8x8 latents, 32 channels) with the `full` LoRA
preset in float32 on one thread, where the kernels cost next to nothing: LoRA layers on the
shorter forward with their weights cast once (`step_casts`, in float32 here), divisions by one
skipped (`skip_unit_divisions`), as the trainer runs them. It prints the median and the best of
`--steps` steps in ms. `--half`: as a FLOAT_16 run on a GPU, the frozen weights in float16 under a
float16 autocast, the LoRA weights cast once to float16 and the frozen norms run as the trainer runs
them (`step_norms`); the CPU's float16 kernels are slower, so it is the change between two versions
that tells, not the figure. Compare two versions of the code with `git worktree` and this script copied
into the older one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import bench._common  # noqa: E402, F401  (sets the offline environment)


def step_times(steps: int, half: bool = False) -> list[float]:
    import contextlib

    import torch

    from ot_gradio.models.tiny.sd15 import tiny_sd15_unet
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_forward import cast_once_layers, step_casts

    unet = tiny_sd15_unet(seed=0)
    add_lora(unet, kind="unet", rank=4, alpha=1.0, dropout=0.0, layer_preset="full", dtype=torch.float32)
    try:
        from ot_gradio.training.unit_scales import skip_unit_divisions
        skip_unit_divisions([unet])
    except ImportError:  # an older version of the code
        pass
    layers = cast_once_layers([unet])
    dtype, cpu = (torch.float16 if half else torch.float32), torch.device("cpu")
    norms = contextlib.nullcontext
    if half:
        from ot_gradio.training.norm_casts import affine_norms, step_norms

        for p in unet.parameters():
            if not p.requires_grad:
                p.data = p.data.to(dtype)
        frozen = affine_norms([unet])
        norms = lambda: step_norms(frozen, dtype, cpu)  # noqa: E731
    g = torch.Generator().manual_seed(1)
    latents, text = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 7, 32, generator=g)
    times = []
    for _ in range(steps + 5):
        started = time.perf_counter()
        with step_casts(layers, dtype, cpu), norms(), torch.autocast("cpu", dtype=dtype, enabled=half):
            unet(latents, torch.tensor([10]), text).sample.float().square().mean().backward()
        times.append(time.perf_counter() - started)
    return times[5:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--half", action="store_true", help="float16 weights and autocast, as a FLOAT_16 run on a GPU")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    times = step_times(args.steps, args.half)
    print(f"tiny SD 1.5 UNet, full LoRA, {'float16 as on a GPU' if args.half else 'float32'}, {args.threads} thread(s): median {statistics.median(times) * 1e3:.2f} ms, "
          f"best {min(times) * 1e3:.2f} ms a step ({args.steps} steps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
