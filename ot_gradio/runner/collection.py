"""Python's cyclic garbage collector in a process that exists for one training run.

Importing torch, diffusers, transformers and peft creates about 630,000 objects that live as long
as the process. Each full collection walks all of them: a run of the benchmark in
`bench/vs_diffusers_loop.py` spent 0.76 s in eight full collections during its imports and about
1.0 s in collections overall, of a 14.3 s run (measured with `gc.callbacks`; docs/PERFORMANCE.md
§10c). None of those collections found more than a few hundred objects to free.

A process whose only job is the run (`python -m ot_gradio train`, the page's
`python -m ot_gradio.runner.worker`) therefore:
- `pause()`: turns collection off at its start, before the libraries are imported;
- `resume()`: once they are (before the model loads), moves every object alive into the
  permanent generation (`gc.freeze`) that collections skip, and turns collection back on, so
  caching a dataset of any size runs with the collector working as usual;
- `settle()`: after setup, before the first step: frees the cycles setup left (a full collection
  over the objects not frozen, tens of milliseconds), then freezes the model, the optimizer and
  the dataset's index, which live until the run ends.

Garbage made while collection was off and still unreachable at `resume()` is frozen with the
rest and never freed: the imports' few hundred small objects (about 7 MB of resident memory
more, measured). Nothing here runs unless `pause()` did: the tests and the benchmarks that train
in their own process keep the collector as it is (freezing there would keep every earlier test's
garbage for good).
"""

from __future__ import annotations

import gc

_owned = False  # this process called pause(): the run is the whole process
_paused = False


def pause() -> None:
    """Collection off until `resume()`; makes this process the owner of the policy."""
    global _owned, _paused
    _owned = _paused = True
    gc.disable()


def resume() -> None:
    """After the imports: freeze what exists, collection on again. Nothing unless paused."""
    global _paused
    if not _paused:
        return
    _paused = False
    gc.freeze()
    gc.enable()


def settle() -> None:
    """After setup, before training: free setup's cycles, then freeze what is left (the model,
    the optimizer, the dataset). Nothing unless this process owns the policy."""
    global _paused
    if not _owned:
        return
    _paused = False
    gc.collect()
    gc.freeze()
    gc.enable()
