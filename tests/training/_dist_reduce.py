"""Run by test_distributed.py under `python -m torch.distributed.run --nproc-per-node=2`: each
process joins through Distributed.from_env, averages known gradients and writes what it got."""

import json
import sys
from pathlib import Path

import torch

from ot_gradio.training.async_reduce import AsyncGradientReducer
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
    result["calls"] = reduce_calls(dist)
    result["async"] = async_cases(dist)
    result["mean"] = dist.mean(float(rank + 1), torch.device("cpu"))
    result["broadcast"] = sorted(dist.broadcast({"stop"} if rank == 0 else set()))
    w = torch.nn.Parameter(torch.full((2,), float(rank)))
    dist.broadcast_parameters([w])
    result["weights"] = w.tolist()
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.close()


def reduce_calls(dist: Distributed) -> dict:
    """The all-reduces (size, dtype) the gradients take per setting: buckets and precision act."""
    real = torch.distributed.all_reduce
    seen: list = []

    def counting(tensor, *args, **kwargs):
        seen.append([tensor.numel(), str(tensor.dtype)])
        return real(tensor, *args, **kwargs)

    torch.distributed.all_reduce = counting
    out = {}
    try:
        big = 300_000  # 1.2 MB in float32
        for name, kw in {"bucket1": {"bucket_mb": 1}, "bucket3": {"bucket_mb": 3}, "unfused": {"fused": False, "bucket_mb": 3},
                         "bf16_weight_dtype": {"precision": "WEIGHT_DTYPE"}, "bf16_float32": {"precision": "FLOAT_32"}}.items():
            dtype = torch.bfloat16 if name.startswith("bf16") else torch.float32
            ps = [torch.nn.Parameter(torch.zeros(big, dtype=dtype)) for _ in range(2)]
            for p in ps:
                p.grad = torch.ones(big, dtype=dtype)
            seen.clear()
            dist.reduce_gradients(ps, **kw)
            out[name] = seen[1:]  # the first reduce asks which weights have gradients anywhere
    finally:
        torch.distributed.all_reduce = real
    return out


def async_cases(dist: Distributed) -> dict:
    """Gradients reduced during real backward passes by AsyncGradientReducer, against the same
    gradients reduced after the pass by reduce_gradients."""
    rank = dist.rank
    out = {}
    for name, fused, accum in (("fused", True, 1), ("per-weight", False, 1), ("accumulated", False, 2)):
        torch.manual_seed(0)
        first, second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        only_rank1, unused = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        # buckets go in reverse order: second's weights first, then first's, only_rank1's, unused's
        params = [*unused.parameters(), *only_rank1.parameters(), *first.parameters(), *second.parameters()]
        reducer = AsyncGradientReducer(dist, "FLOAT_32", fused, 1)
        local = _backward(rank, reducer, params, first, second, only_rank1, accum)
        reducer.finish()
        got = [p.grad for p in params]
        for p, g in zip(params, local, strict=True):
            p.grad = g
        dist.reduce_gradients(params, "FLOAT_32", fused, 1)
        out[name] = {"diffs": [None if a is None or b is None else float((a - b).abs().max())
                               for a, b in zip(got, [p.grad for p in params], strict=True)],
                     "started_in_backward": reducer.started_in_backward,
                     "none": [i for i, g in enumerate(got) if g is None],
                     "expected_none": [i for i, p in enumerate(params) if p.grad is None]}
        reducer.close()
    # a gradient that grows after its bucket was sent is an error, not a silently wrong mean
    torch.manual_seed(0)
    first, second, only_rank1 = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    params = [*only_rank1.parameters(), *first.parameters(), *second.parameters()]
    reducer = AsyncGradientReducer(dist, "FLOAT_32", False, 1)
    _backward(rank, reducer, params, first, second, only_rank1, 1)
    try:
        reducer._on_gradient(second.weight)  # as autograd would after a second accumulation
        out["late_error"] = None
    except RuntimeError as e:
        out["late_error"] = str(e)
    reducer.finish()  # the collectives still match across the processes
    reducer.close()
    return out


def _backward(rank, reducer, params, first, second, only_rank1, accum):
    """`accum` backward passes, armed before the last, and the gradients they make without a reduce
    (the same passes run first unarmed: an armed pass writes means back while it runs)."""
    local = None
    for armed in (False, True):
        torch.manual_seed(rank + 1)
        for p in params:
            p.grad = None
        for micro in range(accum):
            if armed and micro == accum - 1:
                reducer.arm(params)
            x = torch.randn(3, 4)
            # the two processes finish their weights in different orders, and one has an extra layer
            y = second(first(x)) if rank == 0 else only_rank1(first(second(x)))
            y.square().mean().backward()
        if not armed:
            local = [None if p.grad is None else p.grad.clone() for p in params]
    return local


if __name__ == "__main__":
    main(Path(sys.argv[1]))
