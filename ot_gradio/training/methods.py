"""Training methods (LoRA, fine-tune, embedding, ...): one registry entry each.

A method decides which weights train and how the result is saved. The trainer knows none of
them by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch

from ..config.enums import TrainingMethod


class Method(Protocol):
    def setup(self, model: Any, config: Any, device: torch.device) -> list[dict[str, Any]]:
        """Freeze what does not train, add what does; return optimizer parameter groups, each
        with 'params', 'lr' and 'name' (the model part)."""

    def trainable_state(self, model: Any) -> dict[str, torch.Tensor]:
        """The trained weights, for backups."""

    def load_trainable_state(self, model: Any, state: dict[str, torch.Tensor]) -> None: ...

    def save(self, model: Any, config: Any, path: Path, metadata: dict[str, str]) -> Path:
        """Write the result in the config's output format; return the written path."""

    # Optional hooks the trainer calls when a method has them (embeddings.EmbeddingSupport):
    # transform_text(text) -> text: captions and sample prompts before tokenizing (the
    #   embeddings' placeholders become their tokens);
    # after_optimizer_step(model): after every optimizer step (preserve_embedding_norm).
    # A parameter group may name its model part in 'part' (an embedding's text encoder) and carry
    # its own 'stop_training_after' / 'stop_training_after_unit'.


METHODS: dict[TrainingMethod, type] = {}


def register(name: TrainingMethod):
    def wrap(cls: type) -> type:
        METHODS[name] = cls
        return cls

    return wrap


def get_method(name: TrainingMethod) -> Method:
    from . import embedding_method, finetune_method, lora_method  # noqa: F401  (register the methods)

    name = TrainingMethod(name)
    if name not in METHODS:
        raise ValueError(
            f"training_method: {name.value} is not available yet; use one of {', '.join(m.value for m in METHODS)}"
        )
    return METHODS[name]()
