"""Gradient hooks that call a method of an object without keeping the object alive.

A hook registered on a weight (`register_post_accumulate_grad_hook`) is held by the tensor's C++
side, which Python's garbage collector cannot see through: a hook that is a bound method of an
object holding the weight (an optimizer keyed by its weights, an offloaded block) makes a cycle
that is never freed, and keeps the model, its optimizer state and an EMA copy on the card after
the run (three trainers in one process, as bench/gpu_check.py runs them: a fine-tune left 6 GB
behind). The hook here holds the object weakly; once it is gone the hook does nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any


def weak_hook(method: Callable[..., Any], *extra: Any) -> Callable[[Any], None]:
    """`method(tensor, *extra)` while `method`'s object lives."""
    ref = weakref.WeakMethod(method)

    def hook(tensor: Any) -> None:
        bound = ref()
        if bound is not None:
            bound(tensor, *extra)

    return hook


__all__ = ["weak_hook"]
