"""One frozen Linear layer's forward and backward (the input's gradient, what a LoRA on top
needs) in each weight type the page offers for it: the matmul in the train data type (FLOAT_32,
FLOAT_8's expanded weight) against the 8-bit ones (INT_W8A8: torch._int_mm, FLOAT_W8A8:
torch._scaled_mm), through training/quantize.py as a run builds them.

    .venv/bin/python bench/w8a8_layer.py [--size 1024] [--rows 1024] [--threads 1] [--runs 10] [--device cpu]

The types run in turn, `--runs` rounds, so machine noise hits each alike; prints the median time
per forward + backward, its ratio to FLOAT_8 and the largest output difference from the float
layer. On a CPU the figures say what the CPU's kernels do (int8 uses VNNI where it has it; float8
is emulated): the types are meant for GPUs with 8-bit matmul units (bench/gpu_check.py's W8A8 runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common  # noqa: F401  (the offline environment, the repo on the path)

TYPES = ("FLOAT_32", "FLOAT_8", "INT_W8A8", "FLOAT_W8A8")


def main() -> int:
    import torch
    from torch import nn

    from ot_gradio.training.quantize import quantize_linear_layers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="in and out features")
    parser.add_argument("--rows", type=int, default=1024, help="tokens in the batch")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    reference = nn.Linear(args.size, args.size).to(device).requires_grad_(False)
    x = torch.randn(args.rows, args.size, device=device)
    layers, errors = {}, {}
    for name in TYPES:
        layer = nn.Sequential(nn.Linear(args.size, args.size))
        layer[0].load_state_dict(reference.state_dict())
        if name != "FLOAT_32":
            quantize_linear_layers(layer, name, device, torch.float32, "transformer")
        layers[name] = layer.to(device).requires_grad_(False)
        with torch.no_grad():
            errors[name] = float((layers[name](x) - reference(x)).abs().max())

    def step(layer) -> float:
        xi = x.clone().requires_grad_(True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        layer(xi).sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - began

    times: dict[str, list[float]] = {name: [] for name in TYPES}
    for name in TYPES:
        step(layers[name])  # warm-up
    for _ in range(args.runs):
        for name in TYPES:
            times[name].append(step(layers[name]))
    print(f"{args.rows} x {args.size} x {args.size}, {args.threads} thread(s), {device}, median of {args.runs}:")
    base = statistics.median(times["FLOAT_8"])
    for name in TYPES:
        t = statistics.median(times[name])
        print(f"  {name:11s} {t * 1000:8.1f} ms   {t / base:5.2f}x FLOAT_8   largest difference from float {errors[name]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
