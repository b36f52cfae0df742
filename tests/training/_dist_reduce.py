"""Run by test_distributed.py under `python -m torch.distributed.run --nproc-per-node=2`: each
process joins through Distributed.from_env, averages known gradients and writes what it got."""

import json
import sys
from pathlib import Path

import torch

from ot_gradio.training.distributed import Distributed


def main(out: Path) -> None:
    dist = Distributed.from_env("cpu")
    rank = dist.rank
    result = {"rank": rank, "world": dist.world}
    only_rank1 = torch.nn.Parameter(torch.zeros(2))
    frozen = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
    half = torch.nn.Parameter(torch.zeros(5, dtype=torch.bfloat16))
    for name, fused in (("fused", True), ("per-weight", False)):
        a = torch.nn.Parameter(torch.zeros(3))
        b = torch.nn.Parameter(torch.zeros(2, 2))
        a.grad = torch.full((3,), float(rank + 1))  # 1 and 2 -> 1.5
        b.grad = torch.arange(4.0).view(2, 2) * (rank + 1)  # -> 1.5 x arange
        only_rank1.grad = torch.tensor([4.0, 6.0]) if rank == 1 else None  # -> mean with zeros
        half.grad = torch.full((5,), 1.0, dtype=torch.bfloat16)
        dist.reduce_gradients([a, b, only_rank1, frozen, half], fused=fused)
        result[name] = {"a": a.grad.tolist(), "b": b.grad.tolist(), "only": only_rank1.grad.tolist(),
                        "frozen": frozen.grad, "half_dtype": str(half.grad.dtype)}
    result["mean"] = dist.mean(float(rank + 1), torch.device("cpu"))
    result["broadcast"] = sorted(dist.broadcast({"stop"} if rank == 0 else set()))
    w = torch.nn.Parameter(torch.full((2,), float(rank)))
    dist.broadcast_parameters([w])
    result["weights"] = w.tolist()
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
