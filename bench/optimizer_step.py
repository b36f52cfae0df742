"""The optimizer step alone: our default step kernel (fused / foreach where torch has one) against
the plain one-weight-at-a-time step, for the optimizers that have both.

    .venv/bin/python bench/optimizer_step.py [--steps 30] [--threads 1] [--dtype float32]

The weights are the benchmark UNet's (bench/_common.py's SD 1.5 layout at reduced width, 8.5 M
weights, random gradients). Both optimizers are built by `create_optimizer` from the config (the
default, and the same with `fused: false, foreach: false`) and step alternately, so machine noise
hits both alike; the first steps are warm-up. Prints the median step times, their ratio and the
median of the per-pair ratios, and checks that both end with the same weights (within the
kernels' tolerance). Target: where the default is a fused or foreach step, it is no slower than
the plain one (per-pair ratio <= 1.0x); where torch has neither (SGD on a CPU) both run the same step.
"""

from __future__ import annotations

import argparse
import sys
import time

import _common as C


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    C.setup_torch(args.threads)
    import torch

    from ot_gradio.config.optimizer import OptimizerConfig
    from ot_gradio.training.optimizers import create_optimizer

    dtype = getattr(torch, args.dtype)
    shapes = [p.shape for p in C.bench_unet().parameters()]
    print(f"# optimizer step: {C.machine_line()}, {sum(s.numel() for s in shapes) / 1e6:.1f} M weights, {args.dtype}")
    worst = 0.0
    for name in ("ADAMW", "ADAM", "SGD"):
        sides = []
        for kernels in ({}, {"fused": False, "foreach": False}):
            gen = torch.Generator().manual_seed(0)
            params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in shapes]
            optimizer = create_optimizer([{"params": params, "lr": 1e-4}], OptimizerConfig(optimizer=name, stochastic_rounding=False,
                                                                                             **kernels), torch.device("cpu"))
            sides.append((params, optimizer, []))
        grads = [torch.randn(s, generator=torch.Generator().manual_seed(1)).to(dtype) for s in shapes]
        for _ in range(args.warmup + args.steps):
            for params, optimizer, times in sides:
                for p, g in zip(params, grads, strict=True):
                    p.grad = g
                start = time.perf_counter()
                optimizer.step()
                times.append(time.perf_counter() - start)
        fast, slow = (s[2][args.warmup:] for s in sides)
        same = all(torch.allclose(a.float(), b.float(), atol=1e-5 if dtype == torch.float32 else 2e-2, rtol=1e-4)
                   for a, b in zip(sides[0][0], sides[1][0], strict=True))
        ratio = C.med(fast) / C.med(slow)
        pairs = C.med([a / b for a, b in zip(fast, slow, strict=True)])
        print(f"{name:<6} default: {sides[0][1].step_kernel:<45} {C.ms(C.med(fast)):>9}  plain {C.ms(C.med(slow)):>9}  "
              f"ratio {ratio:.3f}x (per pair {pairs:.3f}x), same weights: {same}", flush=True)
        if not same:
            print(f"RESULT optimizer step: {name}'s default step gives different weights: NOT met")
            return 1
        if not sides[0][1].step_kernel.startswith("one weight at a time"):  # else both sides run the same step
            worst = max(worst, pairs)
    print(f"RESULT optimizer step: worst per-pair ratio of the default step to the plain one {worst:.3f}x "
          f"(target <= 1.0x): {'met' if worst <= 1.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
