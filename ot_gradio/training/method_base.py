"""The training method's contract and its registry: each method module (lora_method,
finetune_method, embedding_method) registers its class here; training/methods.py picks one.

A method decides which weights train and how the result is saved. The trainer knows none of
them by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..config.enums import TrainingMethod
from .param_groups import ParamGroup


class Method:
    """A training method: what trains and how the result is written. Subclasses write the four
    steps; the hooks default to doing nothing, so the trainer calls them on every method."""

    embeddings: Any = None  # the method's embeddings (embeddings.Embeddings), if it has any

    def setup(self, model: Any, config: Any, device: torch.device) -> list[ParamGroup]:
        """Freeze what does not train, add what does; the optimizer's parameter groups."""
        raise NotImplementedError

    def trainable_state(self, model: Any) -> dict[str, torch.Tensor]:
        """The trained weights, for backups."""
        raise NotImplementedError

    def load_trainable_state(self, model: Any, state: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def save(self, model: Any, config: Any, path: Path, metadata: dict[str, str]) -> Path:
        """Write the result in the config's output format; return the written path."""
        raise NotImplementedError

    def transform_text(self, text: str) -> str:
        """Captions and sample prompts before tokenizing (embeddings: placeholders -> their tokens)."""
        return text

    def after_optimizer_step(self, model: Any) -> None:
        """After every optimizer step (embeddings: preserve_embedding_norm)."""


METHODS: dict[TrainingMethod, type] = {}


def register(name: TrainingMethod):
    def wrap(cls: type) -> type:
        METHODS[name] = cls
        return cls

    return wrap
