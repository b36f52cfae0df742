"""The EMBEDDING training method (textual inversion): only the embedding's vectors train, in
every text encoder whose `train_embedding` is on; the model itself stays frozen. The result is
an A1111 embedding file (see embeddings.py), with the additional embeddings next to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..config.enums import ModelFormat, TrainingMethod
from .device import output_dtype
from .embeddings import EmbeddingSupport, embeddings_folder
from .method_base import register
from .output_metadata import model_metadata
from .param_groups import ParamGroup


def check_embedding_format(fmt: ModelFormat) -> None:
    if ModelFormat(fmt) != ModelFormat.SAFETENSORS:
        raise ValueError(
            f"output_model_format: {ModelFormat(fmt).value} is not an embedding format; use SAFETENSORS "
            "(the A1111 embedding file that A1111, Forge, ComfyUI and diffusers' load_textual_inversion read)"
        )


@register(TrainingMethod.EMBEDDING)
class EmbeddingMethod(EmbeddingSupport):
    def setup(self, model: Any, config: Any, device: torch.device) -> list[ParamGroup]:
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
        steps, epoch = int(metadata.get("ss_steps", 0)), int(metadata.get("ss_epoch", 0))
        meta = model_metadata(
            config, model, kind="embedding", title=Path(path).stem, steps=steps, epoch=epoch,
            trigger_phrases=[self.main.placeholder],
        )
        written = self.embeddings.save(self.main, path, dtype, meta)
        save_embedding_files(self, model, config, path, dtype, steps=steps, epoch=epoch)
        return written


def save_embedding_files(
    method: EmbeddingSupport, model: Any, config: Any, output: Path, dtype: torch.dtype, *, steps: int, epoch: int
) -> list[Path]:
    """Each additional embedding as its own A1111 file in `<output>_embeddings/` (also when a LoRA
    bundles them: ComfyUI's LoRA loader skips `bundle_emb.*`, its embedding loader reads these
    files), each with its own model-spec header; their names go to the log."""
    written = []
    for embedding in method.additional:
        meta = model_metadata(
            config, model, kind="embedding", title=embedding.name, steps=steps, epoch=epoch,
            trigger_phrases=[embedding.placeholder],
        )
        target = embeddings_folder(output) / f"{embedding.name}.safetensors"
        written.append(method.embeddings.save(embedding, target, dtype, meta))
        print(f"embedding {embedding.placeholder!r} saved as {target}", flush=True)
    method.embedding_files = tuple(written)
    return written
