"""The CPU time a LoRA step costs beyond its kernels: what a GPU box's CPU pays to launch one.

    .venv/bin/python bench/step_cpu_time.py [--steps 300] [--threads 1]

A small-batch step on a fast card waits on the CPU that launches its kernels (docs/PERFORMANCE.md
§17: SD 1.5 LoRA at batch 1 on an H200 keeps the GPU busy 62 ms of 154), and that CPU time is the
Python, the dispatcher and autograd of every operation and module call, not only the launches
(bench/step_operators.py counts those). This times the training step's own forward and backward
code on the tiny SD 1.5 UNet (every block kind, 8x8 latents, 32 channels) with the `full` LoRA
preset in float32 on one thread, where the kernels cost next to nothing: LoRA layers on the
shorter forward with their weights cast once (`step_casts`, in float32 here), divisions by one
skipped (`skip_unit_divisions`), as the trainer runs them. It prints the median and the best of
`--steps` steps in ms. Compare two versions of the code with `git worktree` and this script copied
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


def step_times(steps: int) -> list[float]:
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
    g = torch.Generator().manual_seed(1)
    latents, text = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 7, 32, generator=g)
    times = []
    for _ in range(steps + 5):
        started = time.perf_counter()
        with step_casts(layers, torch.float32, torch.device("cpu")):
            unet(latents, torch.tensor([10]), text).sample.square().mean().backward()
        times.append(time.perf_counter() - started)
    return times[5:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    times = step_times(args.steps)
    print(f"tiny SD 1.5 UNet, full LoRA, float32, {args.threads} thread(s): median {statistics.median(times) * 1e3:.2f} ms, "
          f"best {min(times) * 1e3:.2f} ms a step ({args.steps} steps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
