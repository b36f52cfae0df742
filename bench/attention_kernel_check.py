"""PyTorch's attention kernels on this GPU, forward and backward, against the math kernel, at a
Flux.1 step's attention (24 heads of 128, 1024 image + 512 text tokens, bfloat16) and in the
layouts a diffusers transformer hands them.

    CUDA_LAUNCH_BLOCKING=1 python bench/attention_kernel_check.py [--device cuda] [--tokens 1536]

Why: on an H200 (torch 2.11, CUDA 13) the cuDNN kernel's backward failed inside a Flux NF4 LoRA
step ("mha_graph.execute(...).is_good()", then an illegal memory access, or NaN losses without
CUDA_LAUNCH_BLOCKING); the trainer keeps cuDNN attention off on CUDA since
(models/attention.py `keep_cudnn_attention_off`). This script shows which kernels compute the
right gradients here. Each case is printed before it runs, the flash and memory-efficient ones
first: a kernel that ends the process's CUDA context is the last line printed. A case fails when
an output or gradient is not finite or is further from the math kernel's (in float32) than
bfloat16 rounding explains. Exit status 1 when a flash or memory-efficient case fails (the ones
training uses); cuDNN's failures are reported, not counted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._compare import relative_problems  # noqa: E402

TOLERANCE = 0.02  # relative error against the float32 math kernel


def layouts(batch: int, heads: int, tokens: int, dim: int):
    """(name, q, k, v, upstream gradient) makers: the layouts diffusers' processors produce."""
    import torch

    def bhsd():  # contiguous (batch, heads, tokens, dim)
        return torch.randn(batch, heads, tokens, dim)

    def bshd():  # (batch, tokens, heads, dim) permuted to (batch, heads, tokens, dim): diffusers' attention dispatch
        return torch.randn(batch, tokens, heads, dim).permute(0, 2, 1, 3)

    return [
        ("all contiguous", bhsd, bhsd, bhsd, bhsd),
        ("all permuted (Flux's dispatch)", bshd, bshd, bshd, bshd),
        ("q, k permuted, v contiguous", bshd, bshd, bhsd, bhsd),
        ("q, k, v permuted, gradient contiguous", bshd, bshd, bshd, bhsd),
    ]


def check(backend, make, device, dtype) -> str:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    names = ("q", "k", "v", "upstream")
    tensors = [m().to(device) * (0.5 if i < 3 else 1.0) for i, m in enumerate(make)]
    inputs = [t.to(dtype).requires_grad_(True) for t in tensors[:3]]
    reference = [t.detach().float().requires_grad_(True) for t in tensors[:3]]
    upstream = tensors[3]
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(*inputs)
    (out.float() * upstream).sum().backward()
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(*reference)
    (ref * upstream).sum().backward()
    pairs = [("output", out, ref), *((f"d{n}", i.grad, r.grad) for n, i, r in zip(names, inputs, reference, strict=False))]
    return "; ".join(relative_problems(pairs, TOLERANCE, "the math kernel's"))


def main(argv: list[str] | None = None) -> int:
    import torch
    from torch.nn.attention import SDPBackend

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=1536)
    parser.add_argument("--heads", type=int, default=24)
    parser.add_argument("--dim", type=int, default=128)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name() if device.type == 'cuda' else device.type}", flush=True)
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    failed = 0
    for backend in backends:
        for name, *make in layouts(1, args.heads, args.tokens, args.dim):
            print(f"{backend.name} {name}: ", end="", flush=True)
            try:
                problem = check(backend, make, device, torch.bfloat16)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            except RuntimeError as err:  # a kernel that refuses the case (no kernel for it here)
                problem = f"refused: {str(err).splitlines()[0][:200]}"
                if "illegal memory access" in str(err):
                    raise
            print(problem or "ok", flush=True)
            failed += bool(problem) and backend != SDPBackend.CUDNN_ATTENTION and not problem.startswith("refused")
    print(f"attention_kernel_check: {'flash / memory-efficient cases failed: ' + str(failed) if failed else 'flash and memory-efficient ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
