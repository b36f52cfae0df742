"""Percentile clipping (`optimizer.percentile_clipping`): OneTrainer passes it to bitsandbytes'
optimizers, and bitsandbytes 0.50 dropped it, so it is done here, around the step, as
bitsandbytes did it inside its kernels.

Per weight, a ring of its last 100 squared gradient norms (all 100 filled with the first one);
at each step the weight's gradient is scaled down to the given percentile of that history when its
norm is above it (percentile 5: clipped at the 5th-smallest of the last 100 norms). 100 is off.
The history is part of the optimizer's state dict, so a resumed run clips as the first run would.
"""

from __future__ import annotations

from typing import Any

import torch

KEY = "percentile_clipping"
SLOTS = 100


class PercentileClipping:
    """Installed on one optimizer by `enable_percentile_clipping`; the step pre-hook and the
    state-dict hooks are its methods."""

    def __init__(self, optimizer: torch.optim.Optimizer, percentile: int):
        if not 1 <= percentile < SLOTS:
            raise ValueError(f"optimizer.percentile_clipping: {percentile} is not between 1 and 99 (100 is off)")
        self.optimizer = optimizer
        self.percentile = int(percentile)
        self.history: dict[torch.Tensor, tuple[torch.Tensor, int]] = {}  # weight -> (squared norms, its steps)

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    @torch.no_grad()
    def clip(self, _optimizer: Any = None, _args: Any = None, _kwargs: Any = None) -> None:
        for p in self._params():
            if p.grad is None:
                continue
            norms, step = self.history.get(p, (None, 0))
            step += 1
            squared = p.grad.float().square().sum()
            if norms is None:
                norms = squared.repeat(SLOTS)  # the first norm stands for the whole history
            else:
                norms[step % SLOTS] = squared
            self.history[p] = (norms, step)
            current = norms[step % SLOTS].sqrt()
            limit = torch.sort(norms).values[self.percentile].sqrt()
            scale = torch.where(current > limit, limit / current, torch.ones_like(current))
            p.grad.mul_(scale.to(p.grad.dtype))

    def state_dict(self) -> dict[str, Any]:
        state_dict = self._state_dict()
        index = {id(p): i for i, p in enumerate(self._params())}
        state_dict[KEY] = {index[id(p)]: {"norms": norms, "step": step} for p, (norms, step) in self.history.items() if id(p) in index}
        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        state_dict = dict(state_dict)  # (the caller's backup keeps its entry)
        saved = state_dict.pop(KEY, None)
        result = self._load_state_dict(state_dict, *args, **kwargs)
        if saved is not None:
            params = self._params()
            self.history = {params[int(i)]: (entry["norms"].to(params[int(i)].device), int(entry["step"]))
                            for i, entry in saved.items() if int(i) < len(params)}
        return result


def enable_percentile_clipping(optimizer: torch.optim.Optimizer, percentile: int | None) -> PercentileClipping | None:
    """Clip `optimizer`'s gradients at `percentile` of their recent norms before each step (None or
    100: nothing is installed). The state dict methods are wrapped on the instance, not hooked:
    bitsandbytes' optimizers define their own, which run no hooks."""
    if percentile is None or percentile >= SLOTS:
        return None
    clipping = PercentileClipping(optimizer, percentile)
    optimizer.register_step_pre_hook(clipping.clip)
    clipping._state_dict, clipping._load_state_dict = optimizer.state_dict, optimizer.load_state_dict
    optimizer.state_dict = clipping.state_dict
    optimizer.load_state_dict = clipping.load_state_dict
    optimizer.percentile_clipping = clipping
    return clipping
