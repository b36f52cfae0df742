"""Async gradient reduce (multi-GPU): average the gradients across processes while the backward
pass is still running, instead of all at once after it.

The trained weights are split once into buckets (`async_gradient_reduce_buffer` MB each, one per
weight without `fused_gradient_reduce`), in reverse order, which is about the order the backward
pass finishes them. A hook after each weight's gradient is accumulated marks it ready; when every
weight of the next bucket is ready, the bucket's gradients are copied into one flat tensor and its
all-reduce starts (`async_op`) while the backward pass goes on. Buckets start strictly in their
order, so every process issues the same collectives in the same order whatever order its
gradients come in. At most `IN_FLIGHT` buckets are in flight: beyond that the oldest is waited for
and written back, so the extra memory stays a few buckets, as with the reduce after the pass.
`finish` starts the buckets that were not complete (a weight without a gradient in this process
adds zeros), waits for the rest and writes the means back.

Each bucket carries one extra number per weight, 1 where the weight has a gradient: a weight that
has none in any process keeps none (as in `Distributed.reduce_gradients`). Only the last backward
pass before an optimizer step reduces (`arm`); the others only accumulate. A weight whose gradient
grows again after its bucket was sent (used in two reentrant checkpointed passes) is an error
that names the setting, as in DistributedDataParallel: its mean would miss a part.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..config.enums import GradientReducePrecision
from .distributed import Distributed, _buckets, pack, reduce_dtype, unpack
from .weak_hooks import weak_hook

# Buckets whose all-reduce may run at once (each holds a float32 or weight-type copy of its gradients).
IN_FLIGHT = 4


class AsyncGradientReducer:
    def __init__(self, dist: Distributed, precision: GradientReducePrecision | str, fused: bool, bucket_mb: int):
        self.dist = dist
        self.precision = GradientReducePrecision(precision)
        self.fused = fused
        self.bucket_mb = bucket_mb
        self._params: list[torch.Tensor] = []
        self._buckets: list[list[torch.Tensor]] = []
        self._bucket_of: dict[torch.Tensor, int] = {}
        self._hooks: dict[torch.Tensor, Any] = {}
        self._armed = False
        self._ready: set[torch.Tensor] = set()
        self._left: list[int] = []  # per bucket, how many of its weights are not ready yet
        self._next = 0  # the bucket to start next
        self._in_flight: list[tuple[list[torch.Tensor], torch.Tensor, Any]] = []
        self.started_in_backward = 0  # buckets started before `finish` in the last step (for the tests)

    def arm(self, params: Iterable[torch.Tensor]) -> None:
        """The coming backward pass ends in an optimizer step: reduce the trained weights of
        `params` as their gradients complete (the buckets are remade when that set changes, e.g.
        a part stopped training)."""
        trained = [p for p in params if p.requires_grad]
        if [id(p) for p in trained] != [id(p) for p in self._params]:
            self._plan(trained)
        self._armed = True
        self._ready = set()
        self._left = [len(b) for b in self._buckets]
        self._next = 0
        self._in_flight = []
        self.started_in_backward = 0

    def _plan(self, params: list[torch.Tensor]) -> None:
        keep = {id(p) for p in params}
        for p in self._params:
            if id(p) not in keep:
                self._hooks.pop(p).remove()
        self._params = params
        self._buckets = list(_buckets(params[::-1], self.bucket_mb * 2**20 if self.fused else 0))
        self._bucket_of = {p: i for i, bucket in enumerate(self._buckets) for p in bucket}
        for p in params:
            if p not in self._hooks:
                self._hooks[p] = p.register_post_accumulate_grad_hook(weak_hook(self._on_gradient))

    def _on_gradient(self, p: torch.Tensor) -> None:
        if not self._armed or p not in self._bucket_of:
            return
        if p in self._ready:
            if self._bucket_of[p] < self._next:
                raise RuntimeError(
                    "async_gradient_reduce: a trained weight received more gradient after it was sent to the other GPUs "
                    f"(shape {tuple(p.shape)}; a weight used in two reentrant checkpointed passes); turn off Async gradient "
                    "reduce on the General tab")
            return
        self._ready.add(p)
        self._left[self._bucket_of[p]] -= 1
        while self._next < len(self._buckets) and self._left[self._next] == 0:
            self._start(self._next)
            self.started_in_backward += 1

    def _start(self, index: int) -> None:
        bucket = self._buckets[index]
        grads = [p.grad for p in bucket]
        has = torch.ones(len(bucket), dtype=reduce_dtype(self.precision, bucket[0].dtype), device=bucket[0].device)
        for i, g in enumerate(grads):  # (filled on the device: a copy from the host would wait for it)
            if g is None:
                has[i] = 0
        flat = pack(grads, self.precision, like=bucket, extra=has)
        self._in_flight.append((bucket, flat, torch.distributed.all_reduce(flat, async_op=True)))
        self._next = index + 1
        while len(self._in_flight) > IN_FLIGHT:
            self._complete(*self._in_flight.pop(0))

    def _complete(self, bucket: list[torch.Tensor], flat: torch.Tensor, work: Any) -> None:
        """Wait for a bucket's all-reduce and write the means into its weights' gradients."""
        work.wait()
        flat.div_(self.dist.world)
        if all(p.grad is not None for p in bucket):  # (reading the counts would wait for the device)
            unpack(flat, [p.grad for p in bucket], self.precision)
            return
        has = flat[flat.numel() - len(bucket):].tolist()
        offset = 0
        for p, n in zip(bucket, has, strict=True):
            if n > 0:
                if p.grad is None:  # none here, some elsewhere: this process's share was zeros
                    p.grad = torch.zeros_like(p)
                unpack(flat[offset:offset + p.numel()], [p.grad], self.precision)
            offset += p.numel()

    def finish(self) -> None:
        """Start what is left, wait for every bucket and write the mean gradients back."""
        if not self._armed:
            raise RuntimeError("async gradient reduce: finish() without arm() before the backward pass")
        self._armed = False
        while self._next < len(self._buckets):
            self._start(self._next)
        while self._in_flight:
            self._complete(*self._in_flight.pop(0))

    def close(self) -> None:
        for hook in self._hooks.values():
            hook.remove()
        self._hooks = {}
        self._params = []
