"""What a training method returns for the optimizer: one `ParamGroup` per model part (or per
embedding vector set), typed, instead of dicts whose keys were documented in a comment.

The trainer builds the optimizer from `optimizer_group()`; that dict is the very one the optimizer
holds, so `freeze()` (a part's `stop_training_after` reached) reaches the optimizer too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..config.enums import LearningRateScaler, TimeUnit


@dataclass(eq=False)
class ParamGroup:
    """The weights one optimizer group trains."""

    name: str  # the model part ("unet", "text_encoder") or "embedding/<placeholder>[/<part>]", shown with its LR
    params: list[torch.nn.Parameter]
    lr: float
    part: str | None = None  # the model part the weights live in when `name` is not one (an embedding's text encoder)
    # the group's own stop (an embedding's); None: the config section of `name` decides
    stop_training_after: int | None = None
    stop_training_after_unit: TimeUnit | None = None
    frozen: bool = False
    _optimizer_group: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def model_part(self) -> str:
        """The model part these weights live in (gradients must flow through it)."""
        return self.part or self.name

    @property
    def trains(self) -> bool:
        return any(p.requires_grad for p in self.params)

    def optimizer_group(self) -> dict[str, Any]:
        """The torch optimizer's dict for this group (made once: the optimizer keeps this object)."""
        if self._optimizer_group is None:
            self._optimizer_group = {"params": self.params, "lr": self.lr, "name": self.name}
        return self._optimizer_group

    def freeze(self) -> None:
        """Stop training these weights: no gradients, and a zero learning rate in the optimizer."""
        for p in self.params:
            p.requires_grad_(False)
        self.frozen = True
        self.lr = 0.0
        if self._optimizer_group is not None:
            self._optimizer_group["lr"] = 0.0


def scale_learning_rates(groups: list[ParamGroup], config: Any, processes: int = 1) -> None:
    """`learning_rate_scaler`: every group's learning rate times the square root of the batch
    size, the accumulation steps or both (GLOBAL_*: also the processes), as OneTrainer scales
    its parameter groups. Before the optimizer is made: it keeps the groups' dicts."""
    factor = LearningRateScaler(config.learning_rate_scaler).scale(config.batch_size, config.gradient_accumulation_steps, processes) ** 0.5
    for group in groups:
        group.lr *= factor


def optimizer_groups(groups: list[ParamGroup]) -> list[dict[str, Any]]:
    return [g.optimizer_group() for g in groups]


def all_params(groups: list[ParamGroup], *, trained_only: bool = False) -> list[torch.nn.Parameter]:
    return [p for g in groups for p in g.params if p.requires_grad or not trained_only]
