"""Training methods (LoRA, fine-tune, embedding, VAE fine-tune): the trainer asks for one by name. Each is one
registry entry (method_base.register) in its own module."""

from __future__ import annotations

from ..config.enums import TrainingMethod
from . import embedding_method, finetune_method, lora_method, vae_method  # noqa: F401  (each registers its method)
from .method_base import METHODS, Method


def get_method(name: TrainingMethod) -> Method:
    name = TrainingMethod(name)
    if name not in METHODS:
        raise ValueError(
            f"training_method: {name.value} is not available yet; use one of {', '.join(m.value for m in METHODS)}"
        )
    return METHODS[name]()
