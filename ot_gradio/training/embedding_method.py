"""The EMBEDDING training method (textual inversion): only the embedding's vectors train, in
every text encoder whose `train_embedding` is on; the model itself stays frozen. The result is
an A1111 embedding file (see embeddings.py), with the additional embeddings next to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..config.enums import ModelFormat, TrainingMethod
from .device import output_dtype
from .embeddings import EmbeddingSupport
from .methods import register


def check_embedding_format(fmt: ModelFormat) -> None:
    if ModelFormat(fmt) != ModelFormat.SAFETENSORS:
        raise ValueError(
            f"output_model_format: {ModelFormat(fmt).value} is not an embedding format; use SAFETENSORS "
            "(the A1111 embedding file that A1111, Forge, ComfyUI and diffusers' load_textual_inversion read)"
        )


@register(TrainingMethod.EMBEDDING)
class EmbeddingMethod(EmbeddingSupport):
    def setup(self, model: Any, config: Any, device: torch.device) -> list[dict[str, Any]]:
        check_embedding_format(config.output_model_format)
        for module in model.parts.values():
            module.requires_grad_(False)
        if not config.embedding.train:
            raise ValueError("embedding.train: is off, so the EMBEDDING method has nothing to train; turn it on")
        groups = self.setup_embeddings(model, config, device, main=True)
        self.main = self.embeddings.items[0]
        if not self.main.trains:
            parts = " or ".join(f"{p}.train_embedding" for p in model.text_encoder_names)
            raise ValueError(f"embedding: no text encoder trains the embedding; turn on {parts}")
        return groups

    def trainable_state(self, model: Any) -> dict[str, torch.Tensor]:
        return self.embedding_state()

    def load_trainable_state(self, model: Any, state: dict[str, torch.Tensor]) -> None:
        self.load_embedding_state(state)

    def save(self, model: Any, config: Any, path: Path, metadata: dict[str, str]) -> Path:
        dtype = output_dtype(config.output_dtype)
        meta = {"ss_base_model_name": config.base_model_name, "ss_steps": metadata.get("ss_steps", "0")}
        written = self.embeddings.save(self.main, path, dtype, meta)
        self.save_additional(path, dtype, meta)
        return written
