"""bitsandbytes' NF4 layer at every linear product of a Flux.1 step, forward and backward, against
the same product with the dequantized weight.

    CUDA_LAUNCH_BLOCKING=1 python bench/nf4_kernel_check.py [--device cuda] [--resolution 512]

The products are the ones a Flux.1 dev LoRA step at `--resolution` makes (a two-block transformer
at full width, run once on the meta device with a hook on each Linear: every (tokens, in, out)
shape the 57 blocks have). Each runs through our quantization (training/quantize.py, NFLOAT_4, as
the trainer quantizes a part) on `--device`, under bfloat16 autocast as a BFLOAT_16 step runs,
with the input in float32 (what follows autocast's float32 norms) and in bfloat16, the input
needing a gradient as a LoRA step's does; and T5-XXL's products (512 tokens) without a gradient,
as the frozen NF4 text encoder encodes captions. Each case is printed before it runs: with
CUDA_LAUNCH_BLOCKING=1 a kernel that ends the process's CUDA context is the last line printed.
A case fails when its output or input gradient is not finite or is further from the reference
than NF4 rounding of bfloat16 products explains. Exit status 1 when one fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import bench._common  # noqa: E402,F401  (the offline environment)
from bench._compare import relative_problems  # noqa: E402

T5_XXL_PRODUCTS = [(512, 4096, 4096, "t5 attention"), (512, 4096, 10240, "t5 wi_0 / wi_1"), (512, 10240, 4096, "t5 wo")]
TOLERANCE = 0.02  # relative error (norm of the difference / norm of the reference), bfloat16 products of the same weight


def flux_products(resolution: int) -> list[tuple[int, int, int, str]]:
    """(tokens, in_features, out_features, a layer's name) of each distinct linear product of a
    Flux.1 dev step at `resolution`, batch 1, 512 text tokens, found on meta."""
    import torch
    from diffusers import FluxTransformer2DModel

    from bench.gpu_check_models import FLUX_TRANSFORMER

    with torch.device("meta"):
        model = FluxTransformer2DModel(**{**FLUX_TRANSFORMER, "num_layers": 1, "num_single_layers": 1}).to(torch.bfloat16)
    seen: dict[tuple[int, int, int], str] = {}

    def hook(name):
        def record(module, args):
            x = args[0]
            seen.setdefault((x.numel() // x.shape[-1], module.in_features, module.out_features), name)
        return record

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(hook(name))
    side = resolution // 16
    img, txt = side * side, 512
    with torch.device("meta"):
        model(hidden_states=torch.empty(1, img, 64, dtype=torch.bfloat16),
              encoder_hidden_states=torch.empty(1, txt, 4096, dtype=torch.bfloat16),
              pooled_projections=torch.empty(1, 768, dtype=torch.bfloat16), timestep=torch.empty(1, dtype=torch.bfloat16),
              guidance=torch.empty(1, dtype=torch.bfloat16), img_ids=torch.empty(img, 3), txt_ids=torch.empty(txt, 3))
    return sorted((m, k, n, name) for (m, k, n), name in seen.items())


def check(m: int, k: int, n: int, input_dtype, device, grad: bool = True) -> str:
    """'' when the NF4 layer's output and input gradient match the dequantized product; else what differs."""
    import torch

    from ot_gradio.config.enums import DataType
    from ot_gradio.training.quantize import _bnb_linear

    torch.manual_seed(0)
    plain = torch.nn.Linear(k, n, bias=True)
    layer = _bnb_linear(plain, DataType.NFLOAT_4, torch.bfloat16, device).to(device)  # as quantize_linear_layers makes it
    weight = layer.weight
    from bitsandbytes.functional import dequantize_4bit

    dense = dequantize_4bit(weight.data, weight.quant_state).to(torch.bfloat16)
    x = torch.randn(1, m, k, device=device, dtype=input_dtype, requires_grad=grad)
    x_ref = x.detach().clone().requires_grad_(grad)
    with torch.autocast(device.type, dtype=torch.bfloat16), torch.set_grad_enabled(grad):
        out = layer(x)
        ref = torch.nn.functional.linear(x_ref, dense, layer.bias.to(torch.bfloat16))
    pairs = [("output", out, ref)]
    if grad:
        upstream = torch.randn_like(out)
        (out.float() * upstream.float()).sum().backward()
        (ref.float() * upstream.float()).sum().backward()
        pairs.append(("input gradient", x.grad, x_ref.grad))
    problems = relative_problems(pairs, TOLERANCE, "the dequantized product's")
    if out.dtype != torch.bfloat16:
        problems.append(f"output {out.dtype}, not the autocast type")
    return "; ".join(problems)


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--resolution", type=int, default=512)
    parser.add_argument("--limit", type=int, default=0, help="the first N products only (0: all)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    products = [(*p, True) for p in flux_products(args.resolution)] + [(*p, False) for p in T5_XXL_PRODUCTS]
    if args.limit:
        products = products[:args.limit]
    failed = 0
    for m, k, n, name, grad in products:
        for input_dtype in (torch.float32, torch.bfloat16):
            print(f"{m} x {k} -> {n} ({name}{'' if grad else ', no gradient'}), input {str(input_dtype).removeprefix('torch.')}: ",
                  end="", flush=True)
            problem = check(m, k, n, input_dtype, device, grad)
            if device.type == "cuda":
                torch.cuda.synchronize()
            print(problem or "ok", flush=True)
            failed += bool(problem)
    print(f"nf4_kernel_check: {len(products) * 2 - failed} of {len(products) * 2} cases ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
