"""Fused back pass (the optimizer setting): step each weight as soon as its gradient is ready.

A hook after the gradient of a weight is accumulated runs the optimizer on that weight alone and
frees its gradient, so the gradients of the whole model never exist at once: a lot less memory,
the same result. Each weight gets its own optimizer; the returned optimizer holds the param groups
(the LR scheduler sets their learning rates, the hooks copy them) and the state of them all.
With gradient accumulation the hooks step only in the backward pass of a window's last batch
(`stepping`, set by the trainer before each backward pass); the gradients of the batches before
accumulate as usual, so the memory saving is gone then (OneTrainer runs it so, with that warning).
Gradient clipping by the global norm cannot work (no moment has all the gradients), nor can fp16
gradient scaling. As in OneTrainer, `clip_grad_norm` then clips each weight's gradient by its own
norm before its step.

Optimizers that can step one weight themselves (adv-optm's, Prodigy Plus: ``step_parameter``) keep
one optimizer over all the weights instead (`ParameterSteps`), as OneTrainer runs them: their step
size estimate (Prodigy's d) spans the weights, and ``step()`` after the backward pass only finishes
the step (Prodigy_adv updates d there; Prodigy Plus does it after the last weight).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...config.optimizer import fused_back_pass_on
from ..weak_hooks import weak_hook
from .registry import create_optimizer


def state_follows_weight(state: dict[str, Any] | None, p: torch.Tensor) -> None:
    """Move a weight's optimizer state to the weight's device where it is elsewhere: a weight that
    layer offloading keeps in RAM is stepped on the GPU, but a resumed backup's state was loaded
    next to it in RAM. Scalars (a step count) stay where the optimizer keeps them."""
    if not state:
        return
    for key, value in state.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.device != p.device:
            state[key] = value.to(p.device)


def set_stepping(optimizer: Any, stepping: bool) -> None:
    """Tell a fused back pass whether the coming backward pass ends an accumulation window (its
    hooks step the weights) or not (the gradients accumulate); other optimizers: nothing."""
    if isinstance(optimizer, (FusedBackPass, ParameterSteps)):
        optimizer.stepping = stepping


class FusedBackPass(torch.optim.Optimizer):
    """Steps happen in the backward pass; ``step()`` itself does nothing."""

    stepping = True  # False: a backward pass inside an accumulation window, whose gradients stay

    def __init__(self, param_groups: list[dict[str, Any]], make: Callable[[list[dict[str, Any]]], torch.optim.Optimizer],
                 clip: float | None = None):
        super().__init__(param_groups, {})
        self._clip = clip
        self._per_weight: dict[torch.Tensor, tuple[torch.optim.Optimizer, dict[str, Any]]] = {}
        self._hooks = []
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                sub = make([{"params": [p], "lr": group["lr"], "name": group.get("name", "")}])
                self._per_weight[p] = (sub, group)
                self._hooks.append(p.register_post_accumulate_grad_hook(weak_hook(self._step_weight)))

    def _step_weight(self, p: torch.Tensor) -> None:
        if not self.stepping:
            return
        sub, group = self._per_weight[p]
        sub.param_groups[0]["lr"] = group["lr"]
        if self._clip:
            torch.nn.utils.clip_grad_norm_(p, self._clip)
        state_follows_weight(sub.state.get(p), p)
        sub.step()
        p.grad = None

    def optimizer_of(self, p: torch.Tensor) -> torch.optim.Optimizer | None:
        """The optimizer that steps weight ``p`` (None for a weight that does not train)."""
        entry = self._per_weight.get(p)
        return entry[0] if entry else None

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return closure() if closure is not None else None

    def train(self) -> None:
        for sub, _ in self._per_weight.values():
            if callable(getattr(sub, "train", None)):
                sub.train()

    def eval(self) -> None:
        for sub, _ in self._per_weight.values():
            if callable(getattr(sub, "eval", None)):
                sub.eval()

    def state_dict(self) -> dict[str, Any]:
        return {"per_weight": [sub.state_dict() for sub, _ in self._per_weight.values()],
                "lrs": [g["lr"] for g in self.param_groups]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        subs = list(self._per_weight.values())
        if len(state_dict.get("per_weight", [])) != len(subs):
            raise ValueError("optimizer.fused_back_pass: the backup's optimizer state does not match these weights "
                             "(was it made with the fused back pass on, for the same parts?)")
        for (sub, _), state in zip(subs, state_dict["per_weight"], strict=True):
            sub.load_state_dict(state)
        for group, lr in zip(self.param_groups, state_dict["lrs"], strict=False):
            group["lr"] = lr

    def remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()


class ParameterSteps(torch.optim.Optimizer):
    """The fused back pass of an optimizer with ``step_parameter``: the same optimizer, stepped one
    weight at a time from gradient hooks. Param groups, state and its state dict are the optimizer's own."""

    stepping = True  # as FusedBackPass.stepping

    def __init__(self, optimizer: torch.optim.Optimizer, clip: float | None = None):
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self._clip = clip
        self._hooks = [p.register_post_accumulate_grad_hook(weak_hook(self._step_weight, g, i))
                       for g, group in enumerate(self.param_groups) for i, p in enumerate(group["params"]) if p.requires_grad]

    def _step_weight(self, p: torch.Tensor, g: int, i: int) -> None:
        if not self.stepping:
            return
        if self._clip:
            torch.nn.utils.clip_grad_norm_(p, self._clip)
        state_follows_weight(self.optimizer.state.get(p), p)
        self.optimizer.step_parameter(p, self.optimizer.param_groups[g], i)  # looked up now: loading a backup replaces the groups
        p.grad = None

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return self.optimizer.step(closure)  # every gradient is gone: only the end-of-step work

    def train(self) -> None:
        if callable(getattr(self.optimizer, "train", None)):
            self.optimizer.train()

    def eval(self) -> None:
        if callable(getattr(self.optimizer, "eval", None)):
            self.optimizer.eval()

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state

    def remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()


def fused_back_pass(optimizer: torch.optim.Optimizer, param_groups: list[dict[str, Any]], config: Any, device: torch.device,
                    scaler: Any = None, warmup_steps: int = 0) -> torch.optim.Optimizer:
    """The optimizer to train with: ``optimizer`` itself, or a fused back pass over the same
    settings when ``optimizer.fused_back_pass`` is on and the chosen optimizer offers it."""
    settings = config.optimizer
    if not fused_back_pass_on(config):
        return optimizer
    if scaler is not None:
        raise ValueError("optimizer.fused_back_pass: FLOAT_16 training of float32 weights scales the loss, which the fused back "
                         "pass cannot undo per weight here; train in BFLOAT_16, or turn the fused back pass off")
    clip = getattr(config, "clip_grad_norm", None)
    if callable(getattr(optimizer, "step_parameter", None)):
        return ParameterSteps(optimizer, clip=clip)
    return FusedBackPass(param_groups, lambda groups: create_optimizer(groups, settings, device, warmup_steps=warmup_steps), clip=clip)
