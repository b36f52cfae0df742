"""Comparing a kernel's results with a reference's, for the kernel checks (attention_kernel_check.py,
nf4_kernel_check.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def relative_problems(pairs: Iterable[tuple[str, Any, Any]], tolerance: float, reference: str) -> list[str]:
    """For each (name, got, want) pair of tensors: what is wrong with `got`, if anything (not
    finite, or its relative distance from `want`, the norm of the difference over `want`'s, above
    `tolerance`), naming the `reference`."""
    import torch

    problems = []
    for name, got, want in pairs:
        got, want = got.float(), want.float()
        if not torch.isfinite(got).all():
            problems.append(f"{name} not finite")
            continue
        error = ((got - want).norm() / want.norm().clamp_min(1e-12)).item()
        if error > tolerance:
            problems.append(f"{name} {error:.3g} from {reference}")
    return problems
