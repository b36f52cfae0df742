"""LoKr's vec trick (`lokr_vec_trick`, training/lokr_switches.py): the memory and time of one
forward and backward of a LoKr Linear layer with and without it, at a full-size layer's shape.

Without the trick the layer builds its whole (out, in) delta kron(w1, w2) in the forward and its
gradient in the backward; with it the factors are applied to the input one after the other. Each
side runs in a child process of its own; the memory figure is the child's peak resident set
growth over the step (ru_maxrss, so CPU memory: what the full-size delta costs on a GPU too, in
the same bytes). Times are the median of --repeats steps after one warm-up step.

    python bench/lokr_vec_trick.py [--in 3072 --out 12288 --tokens 1024 --rank 16 --threads 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(args: argparse.Namespace) -> dict:
    import torch
    from torch import nn

    sys.path.insert(0, str(ROOT))
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_variants import AdapterSpec

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.in_features, args.out_features, bias=False))
    add_lora(model, kind="unet", rank=args.rank, alpha=1.0, dropout=0.0, layer_preset="full",
             spec=AdapterSpec(peft_type="LOKR", lokr_vec_trick=args.vec_trick))
    x = torch.randn(args.tokens, args.in_features)

    def step() -> float:
        start = time.perf_counter()
        model(x).square().mean().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()  # warm-up: the peak of one step
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    times = [step() for _ in range(args.repeats)]
    return {"vec_trick": args.vec_trick, "peak_growth_mb": peak / 1024, "step_ms": 1000 * statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in", dest="in_features", type=int, default=3072)
    parser.add_argument("--out", dest="out_features", type=int, default=12288)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vec-trick", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    delta_mb = args.in_features * args.out_features * 4 / 2**20
    print(f"LoKr Linear {args.in_features} -> {args.out_features}, rank {args.rank}, {args.tokens} tokens, float32; "
          f"the whole delta is {delta_mb:.0f} MB")
    base = [sys.executable, __file__, "--child", "--in", str(args.in_features), "--out", str(args.out_features),
            "--tokens", str(args.tokens), "--rank", str(args.rank), "--repeats", str(args.repeats), "--threads", str(args.threads)]
    for trick in (False, True):
        out = subprocess.run(base + (["--vec-trick"] if trick else []), capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"vec trick {'on ' if trick else 'off'}: peak growth {result['peak_growth_mb']:7.1f} MB, step {result['step_ms']:7.1f} ms")


if __name__ == "__main__":
    main()
