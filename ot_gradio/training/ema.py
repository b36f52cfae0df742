"""Exponential moving average (EMA) of the trained weights, as OneTrainer keeps it (EMAModule).

Only the trained weights are averaged: the LoRA matrices for LoRA, the trained parts for a
fine-tune. The copy lives on the training device (EMA GPU) or in CPU memory (EMA CPU).

Every `ema_update_step_interval` optimizer steps: ema += (1 - d) (weight - ema), with
d = min((1 + step) / (10 + step), ema_decay), so early averages follow the weights closely
instead of dragging the random start along. The average is kept in float32 whatever the weights'
data type. `step` is the 0-based optimizer step; frozen weights
(a part past its `stop_training_after`) are left alone.

The EMA weights are what gets saved when EMA is on; samples use them too, and with
`non_ema_sampling` each sample is also drawn with the live weights. Backups keep the EMA
weights, so a resumed run continues the same average.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch


class EMA:
    def __init__(self, params: Sequence[torch.nn.Parameter], decay: float, update_interval: int = 1, device: torch.device | str | None = None):
        self.decay = float(decay)
        self.update_interval = max(1, int(update_interval))
        self.device = torch.device(device) if device is not None else None
        self.weights = [p.detach().to(self.device or p.device, torch.float32, copy=True) for p in params]

    def current_decay(self, step: int) -> float:
        return min((1 + step) / (10 + step), self.decay)

    @torch.no_grad()
    def step(self, params: Sequence[torch.nn.Parameter], step: int) -> bool:
        """Update after optimizer step `step` (0-based); returns whether it updated."""
        if (step + 1) % self.update_interval:
            return False
        keep = 1.0 - self.current_decay(step)
        pairs = [(ema, p.detach()) for ema, p in zip(self.weights, params, strict=True) if p.requires_grad]
        if pairs:  # ema + keep * (p - ema) for all of them in a few kernels (a GPU step launches one per weight otherwise)
            emas = [ema for ema, _ in pairs]
            live = [p if (p.device, p.dtype) == (ema.device, ema.dtype) else p.to(ema.device, ema.dtype) for ema, p in pairs]
            torch._foreach_lerp_(emas, live, keep)
        return True

    @torch.no_grad()
    def copy_to(self, params: Sequence[torch.nn.Parameter]) -> None:
        for ema, p in zip(self.weights, params, strict=True):
            p.copy_(ema.to(p.device, p.dtype))

    @contextlib.contextmanager
    def applied(self, params: Sequence[torch.nn.Parameter]) -> Iterator[None]:
        """The EMA weights in the model for the duration; the live weights come back exactly."""
        with torch.no_grad():
            live = [p.detach().clone() for p in params]
        self.copy_to(params)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, saved in zip(params, live, strict=True):
                    p.copy_(saved)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "weights": [w.detach().cpu().clone() for w in self.weights]}

    def load_state_dict(self, state: dict) -> None:
        weights = state["weights"]
        if len(weights) != len(self.weights) or any(a.shape != b.shape for a, b in zip(weights, self.weights, strict=True)):
            raise ValueError("the backup's EMA weights do not match the trained weights of this run")
        self.weights = [w.to(old.device, old.dtype) for w, old in zip(weights, self.weights, strict=True)]
