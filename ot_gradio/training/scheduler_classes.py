"""The LR scheduler objects that need torch: ADAFACTOR and CUSTOM. The curves of the others are
pure functions in schedulers.py, which the page imports without torch."""

from __future__ import annotations

import ast
import importlib
import sys
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, SequentialLR


def _is_adafactor(optimizer: Any) -> bool:
    module = sys.modules.get("transformers.optimization")  # loaded if an Adafactor exists; importing it takes seconds
    return module is not None and isinstance(optimizer, module.Adafactor)


class AdafactorSchedule(LambdaLR):
    """transformers' AdafactorSchedule: adaptive Adafactor (relative step) computes its own learning
    rate, and this copies it into the param groups so the log and TensorBoard show it. Before the
    first step, and with relative step off, the learning rate stays as set."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        fused = hasattr(optimizer, "optimizer_of")
        inner = next((optimizer.optimizer_of(p) for g in optimizer.param_groups for p in g["params"]), None) if fused else optimizer
        if not _is_adafactor(inner):
            raise ValueError(f"learning_rate_scheduler: ADAFACTOR reads the learning rate from the ADAFACTOR optimizer, "
                             f"not from {type(inner).__name__}; choose another scheduler or the ADAFACTOR optimizer")
        super().__init__(optimizer, lambda _: 1.0)

    def _computed_lr(self, group: dict[str, Any]) -> float | None:
        fused = hasattr(self.optimizer, "optimizer_of")  # the fused back pass has an Adafactor per weight
        for p in group["params"]:
            inner = self.optimizer.optimizer_of(p) if fused else self.optimizer
            if inner is None:
                continue
            own_group = inner.param_groups[0] if fused else group
            state = inner.state.get(p)
            if own_group.get("relative_step") and state and "step" in state:
                return float(inner._get_lr(own_group, state))  # a tensor there (its RMS of the weight)
        return None

    def get_lr(self) -> list[float]:
        lrs = []
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            computed = self._computed_lr(group)
            lrs.append(base if computed is None else computed)
        return lrs


def _builds_a_scheduler(klass: Any) -> bool:
    """A scheduler class, or one of transformers' / diffusers' functions that build one."""
    if isinstance(klass, type):
        return issubclass(klass, LRScheduler)
    module = str(getattr(klass, "__module__", "") or "")
    return callable(klass) and module in ("transformers.optimization", "diffusers.optimization")


def custom_scheduler(optimizer: torch.optim.Optimizer, class_path: str | None, params: list[dict[str, Any]],
                     placeholders: dict[str, Any], warmup_steps: int) -> LRScheduler:
    """OneTrainer's CUSTOM scheduler: ``module.Class`` built with the optimizer and the
    ``scheduler_params`` ({"key", "value"}; values are Python literals or %LR%, %EPOCHS%,
    %STEPS_PER_EPOCH%, %TOTAL_STEPS%, %SCHEDULER_STEPS%), after a linear warmup if one is set."""
    if not class_path or "." not in class_path.strip("."):
        raise ValueError(f"custom_learning_rate_scheduler: {class_path!r} is not a class path in the form module.Class "
                         "(e.g. torch.optim.lr_scheduler.StepLR)")
    module_name, _, class_name = class_path.strip().rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"custom_learning_rate_scheduler: cannot import module {module_name!r} ({err})") from None
    klass = getattr(module, class_name, None)
    if klass is None:
        raise ValueError(f"custom_learning_rate_scheduler: module {module_name!r} has no class {class_name!r}")
    if not _builds_a_scheduler(klass):  # (anything else called with the parameters could run any code: transformers.pipeline)
        raise ValueError(f"custom_learning_rate_scheduler: {class_path} is not a learning rate scheduler: give a subclass of "
                         "torch.optim.lr_scheduler.LRScheduler, or a get_..._schedule function of transformers.optimization or "
                         "diffusers.optimization")
    args: dict[str, Any] = {}
    for i, item in enumerate(params or []):
        key, value = item.get("key"), item.get("value")
        if not key:
            raise ValueError(f"scheduler_params[{i}].key: empty; every parameter needs a name")
        if isinstance(value, str):
            if value.strip() in placeholders:
                value = placeholders[value.strip()]
            else:
                try:
                    value = ast.literal_eval(value)
                except (ValueError, SyntaxError):
                    raise ValueError(f"scheduler_params[{i}].value: {value!r} for {key} is not a Python literal "
                                     f"(a number, True/False, a quoted string or a list) nor one of {', '.join(placeholders)}") from None
        args[key] = value
    try:
        scheduler = klass(optimizer=optimizer, **args)
    except TypeError as err:
        raise ValueError(f"scheduler_params: {class_path} does not take these parameters ({err})") from None
    if warmup_steps > 0:
        warmup = LambdaLR(optimizer, lambda step: min(1.0, step / warmup_steps))  # from 0, as OneTrainer's
        scheduler = SequentialLR(optimizer, schedulers=[warmup, scheduler], milestones=[warmup_steps])
    return scheduler
