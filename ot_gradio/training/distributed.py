"""Data-parallel training across processes (multi-GPU; two CPU processes on gloo in the tests).

The processes are started by `torch.distributed.run` (what `accelerate launch --multi_gpu` runs;
see runner/launch.py) and join their process group through accelerate's `PartialState` (NCCL on
GPUs, gloo on CPU). Everything here is a thin layer over torch.distributed collectives:

- Every process holds the same model and draws the same random numbers (same seed, same draws),
  so one "global batch" of `batch_size x processes` samples is planned identically everywhere and
  each process trains its own slice (`shard`). Per-sample random draws (timesteps, noise, caption
  dropout, unmasked-probability) are made for the whole global batch and sliced too (`mine`): a
  two-process run at batch size B sees the same images, noise and timesteps as one process at
  batch size 2B, and its loss curve matches that run's.
- Gradients are averaged across processes once per optimizer step (`reduce_gradients`), before
  unscaling and clipping, so every process takes the identical optimizer step.
- Only the main process writes events, samples, saves and backups; requests from the page (stop,
  sample now, ...) are read there and broadcast, so every process acts on the same step.

With one process (`world == 1`) every method is a no-op and nothing from torch.distributed is used.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from ..config.devices import in_rank_process
from ..config.enums import GradientReducePrecision
from .optimizers.stochastic_rounding import copy_stochastic_

# The other processes wait in a collective while the main one fills the latent cache (hours for a
# big dataset), samples, saves or writes a backup. A process that dies is noticed by
# torch.distributed.run, not by this timeout, which only has to be longer than any of those.
COLLECTIVE_TIMEOUT = timedelta(hours=24)


def launched_world_size() -> int:
    """How many processes the multi-GPU launcher started (1 when it did not start this one)."""
    if not in_rank_process():
        return 1
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


class Distributed:
    """This process's place in the run: rank, world size, device index, and the collectives."""

    def __init__(self, rank: int = 0, world: int = 1, local_rank: int = 0):
        self.rank = rank
        self.world = world
        self.local_rank = local_rank

    @classmethod
    def from_env(cls, device_type: str) -> Distributed:
        """Join the process group torch.distributed.run set up (one process: nothing to join)."""
        if launched_world_size() == 1:
            return cls()
        from accelerate import PartialState  # noqa: PLC0415

        state = PartialState(cpu=device_type != "cuda", timeout=COLLECTIVE_TIMEOUT)
        return cls(state.process_index, state.num_processes, state.local_process_index)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    # --- data ---------------------------------------------------------------------------------
    def shard(self, items: list[Any]) -> list[Any]:
        """This process's equal share of a global batch (its length is a multiple of `world`)."""
        if not self.active:
            return items
        if len(items) % self.world:
            raise ValueError(f"a global batch of {len(items)} cannot be split evenly across {self.world} processes")
        size = len(items) // self.world
        return items[self.rank * size:(self.rank + 1) * size]

    def mine(self, drawn: torch.Tensor) -> torch.Tensor:
        """This process's rows of a per-sample draw made for the whole global batch."""
        if not self.active:
            return drawn
        size = drawn.shape[0] // self.world
        return drawn[self.rank * size:(self.rank + 1) * size]

    def spread(self, mine: torch.Tensor) -> torch.Tensor:
        """This process's per-sample rows placed in a global batch's (the others zero): what a draw
        made for the whole global batch reads where `mine` will take these rows back."""
        if not self.active:
            return mine
        out = mine.new_zeros((mine.shape[0] * self.world, *mine.shape[1:]))
        out[self.rank * mine.shape[0]:(self.rank + 1) * mine.shape[0]] = mine
        return out

    # --- collectives --------------------------------------------------------------------------
    def barrier(self) -> None:
        if self.active:
            torch.distributed.barrier()

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """The main process runs the block first (filling a cache), the others after it (reading it)."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()

    def broadcast(self, value: Any) -> Any:
        """The main process's `value`, on every process."""
        if not self.active:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def sync_random_state(self) -> None:
        """Give every process the main process's random state (Python, NumPy, torch, and the
        current GPU's), so the global-batch draws agree whatever setup did in each process."""
        if not self.active:
            return
        state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state()
        state = self.broadcast(state)
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        if "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"])

    def mean(self, value: float, device: torch.device) -> float:
        """The mean of a number over the processes (the logged loss of a step)."""
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        return float(t.item()) / self.world

    def broadcast_parameters(self, params: Iterable[torch.Tensor]) -> None:
        """Start every process from the main process's weights (as DistributedDataParallel does)."""
        if not self.active:
            return
        with torch.no_grad():
            for p in params:
                torch.distributed.broadcast(p.data, src=0)

    def reduce_gradients(
        self,
        params: Iterable[torch.Tensor],
        precision: GradientReducePrecision = GradientReducePrecision.FLOAT_32_STOCHASTIC,
        fused: bool = True,
        bucket_mb: int = 100,
    ) -> None:
        """Replace each trained weight's gradient by its mean over the processes.

        A weight that has a gradient in any process gets one everywhere (zeros where it had none),
        so every optimizer sees the same set. `precision`: FLOAT_32 adds up in float32,
        WEIGHT_DTYPE in the gradient's own type; the _STOCHASTIC variants round the float32 result
        back into a half-precision gradient stochastically. `fused` packs the gradients into
        buckets of `bucket_mb` MB, one all-reduce each; otherwise one all-reduce per weight."""
        if not self.active:
            return
        params = [p for p in params if p.requires_grad]
        if not params:
            return
        device = params[0].device
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
        torch.distributed.all_reduce(has)
        live = [p for p, n in zip(params, has.tolist(), strict=True) if n > 0]
        for p in live:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        for grads in _buckets([p.grad for p in live], bucket_mb * 2**20 if fused else 0):
            flat = pack(grads, precision)
            torch.distributed.all_reduce(flat)
            unpack(flat.div_(self.world), grads, precision)

    def close(self) -> None:
        if self.active and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def reduce_dtype(precision: GradientReducePrecision | str, dtype: torch.dtype) -> torch.dtype:
    """The type gradients of `dtype` are added up in: float32, or their own (WEIGHT_DTYPE*)."""
    wide = GradientReducePrecision(precision) in (GradientReducePrecision.FLOAT_32, GradientReducePrecision.FLOAT_32_STOCHASTIC)
    return torch.float32 if wide else dtype


def pack(grads: list[torch.Tensor | None], precision: GradientReducePrecision | str, like: list[torch.Tensor] | None = None,
         extra: torch.Tensor | None = None) -> torch.Tensor:
    """One flat tensor of the gradients in the type they are added up in; a missing gradient (None)
    is zeros shaped as its weight in `like`; `extra` (already in that type) goes at the end."""
    first = next(g for g in (*grads, *(like or [])) if g is not None)
    dtype = reduce_dtype(precision, first.dtype)
    parts = [(g if g is not None else torch.zeros_like(like[i])).reshape(-1).to(dtype) for i, g in enumerate(grads)]
    return torch.cat(parts if extra is None else [*parts, extra])


def unpack(flat: torch.Tensor, grads: list[torch.Tensor], precision: GradientReducePrecision | str) -> None:
    """Copy a reduced flat tensor back into the gradients (stochastically rounded into bfloat16
    ones for the _STOCHASTIC precisions)."""
    stochastic = GradientReducePrecision(precision) in (GradientReducePrecision.FLOAT_32_STOCHASTIC,
                                                        GradientReducePrecision.WEIGHT_DTYPE_STOCHASTIC)
    offset = 0
    for g in grads:
        part = flat[offset:offset + g.numel()].view_as(g)
        offset += g.numel()
        if stochastic and g.dtype == torch.bfloat16 and part.dtype == torch.float32:
            copy_stochastic_(g, part.contiguous())
        else:
            g.copy_(part)


def _buckets(grads: list[torch.Tensor], limit_bytes: int) -> Iterator[list[torch.Tensor]]:
    """Consecutive gradients of one type and device, up to `limit_bytes` each (0: one per bucket)."""
    bucket: list[torch.Tensor] = []
    size = 0
    for g in grads:
        nbytes = g.numel() * g.element_size()
        if bucket and (size + nbytes > limit_bytes or g.dtype != bucket[0].dtype or g.device != bucket[0].device):
            yield bucket
            bucket, size = [], 0
        bucket.append(g)
        size += nbytes
    if bucket:
        yield bucket
