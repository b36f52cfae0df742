"""Load the next batches in background threads while the current step trains (`dataloader_threads`).

A batch is planned before the epoch starts (crop, flip, augmentation and caption are drawn by
the epoch plan), so loading it is a pure function of its index: threads change when a batch is
loaded, never what it holds, and a run trains the same with 0 threads or 8. Image decoding,
resizing and safetensors reads release the GIL, so the threads overlap with the step.

At most ``ahead`` batches (2 per thread) are loaded or in flight at a time, so memory stays
bounded; stopping early (a stop request, an error) cancels the rest.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any


@dataclass
class LoadStats:
    """How long the training loop waited for data (seconds) and for how many batches."""

    waited: float = 0.0
    batches: int = 0


def prefetched(batches: Sequence[Any], start: int = 0, threads: int = 0, ahead: int | None = None,
               stats: LoadStats | None = None) -> Iterator[tuple[int, Any]]:
    """(index, batch) for ``batches[start:]`` in order; with ``threads`` > 0 the following
    batches load in that many background threads meanwhile."""
    stats = stats if stats is not None else LoadStats()
    if threads <= 0:
        for index in range(start, len(batches)):
            began = time.perf_counter()
            batch = batches[index]
            stats.waited += time.perf_counter() - began
            stats.batches += 1
            yield index, batch
        return
    ahead = max(1, ahead if ahead is not None else 2 * threads)
    pending: deque[tuple[int, Future]] = deque()
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ot-data")
    try:
        following = start
        while pending or following < len(batches):
            while following < len(batches) and len(pending) < ahead:
                pending.append((following, pool.submit(batches.__getitem__, following)))
                following += 1
            index, future = pending.popleft()
            began = time.perf_counter()
            batch = future.result()
            stats.waited += time.perf_counter() - began
            stats.batches += 1
            yield index, batch
    finally:
        for _, future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
