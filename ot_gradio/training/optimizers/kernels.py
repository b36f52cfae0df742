"""Which step kernel a torch optimizer uses: fused, foreach (multi-tensor) or one weight at a time.

The fused and foreach steps compute the same update as the plain loop, faster (AdamW fused took
0.77x the step time on a CPU in bench/overhead.py). Both settings are on by default, meaning "where
torch has the kernel for these weights' device and dtype"; off in the config means never. The
fused step wins over foreach (torch refuses both at once). The choice is kept on the optimizer
(``step_kernel``) so the trainer can log it.
"""

from __future__ import annotations

from typing import Any

import torch

try:  # torch's own rule for what it can fuse (private, so with a fallback)
    from torch.optim.optimizer import _default_to_fused_or_foreach
except ImportError:  # pragma: no cover - older or newer torch
    _default_to_fused_or_foreach = None


def _available(params: list[torch.Tensor], differentiable: bool) -> tuple[bool, bool]:
    """(torch has a fused step for all these weights, it has a foreach step for them)."""
    if differentiable or not params:
        return False, False
    if _default_to_fused_or_foreach is not None:
        fused, _ = _default_to_fused_or_foreach(params, differentiable, use_fused=True)
        _, foreach = _default_to_fused_or_foreach(params, differentiable, use_fused=False)
        return fused, foreach
    devices = {p.device.type for p in params}
    fused = devices <= {"cuda", "cpu", "mps", "xpu"} and all(torch.is_floating_point(p) for p in params)
    return fused, devices <= {"cuda", "xpu"}


def choose_kernels(keys: dict[str, str], kwargs: dict[str, Any], params: list[torch.Tensor]) -> tuple[dict[str, Any], str]:
    """Set the constructor's ``fused``/``foreach`` arguments (for optimizers that take them) to
    what torch offers for ``params`` and the config allows; return them and a one-line note."""
    takes_fused, takes_foreach = "fused" in keys.values(), "foreach" in keys.values()
    if not (takes_fused or takes_foreach):
        return kwargs, "the library's own step"
    can_fuse, can_foreach = _available(params, bool(kwargs.get("differentiable")))
    where = ", ".join(sorted({f"{p.device.type} {str(p.dtype).removeprefix('torch.')}" for p in params})) or "no weights"
    out = dict(kwargs)
    fused = takes_fused and out.get("fused") is not False and can_fuse
    foreach = takes_foreach and out.get("foreach") is not False and can_foreach and not fused
    if takes_fused:
        out["fused"] = fused
    if takes_foreach:
        out["foreach"] = foreach
    if fused:
        return out, f"fused step (torch has one for {where})"
    if foreach:
        return out, f"foreach step (torch has one for {where})"
    why = ["differentiable steps are never fused"] if kwargs.get("differentiable") else []
    if takes_fused and not why:
        why.append("fused off in the config" if kwargs.get("fused") is False else f"no fused step for {where}")
    if takes_foreach and not kwargs.get("differentiable"):
        why.append("foreach off in the config" if kwargs.get("foreach") is False else f"no foreach step for {where}")
    return out, f"one weight at a time ({'; '.join(why)})"
