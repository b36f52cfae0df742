"""Output embeddings (OneTrainer's `is_output_embedding`): an embedding learnt on a text
encoder's output instead of its input.

The embedding's tokens still go into the prompt, with zero input vectors that never train; in
the sequence the family makes its prompt embedding from (after the clip-skip layer and the final
norm: `Family.output_embedded`, which each family's `encode_text` calls per text encoder in
`output_embedding_parts`), the rows at those tokens are replaced by the embedding's own output
vectors [tokens, encoder width], float32, which are what trains (saved in the output data type,
as OneTrainer). They start as the encoder's output at the layer they are put in at (after clip
skip) for the embedding's tokens alone, their input vectors the initial text's (its tokens cut or
filled with '*' as for an input embedding). OneTrainer encodes the initial text followed by a '*'
per token at clip skip 0 and keeps the rows after the first (`[1:][:token_count]`): for CLIP,
causal and with a start token, the same rows at clip skip 0, but the last layer's at any other
clip skip, though it puts them in at the clip-skip layer; for T5, which has no start token and
reads both ways, rows one token on (the text's first token skipped) that see the whole text.

A text encoder only pooled (Flux's and HunyuanVideo's CLIP-L, HiDream's CLIPs) keeps the initial
text's input vectors, frozen (OneTrainer trains them, as an input embedding's, where the encoder's
Train embedding is on). HiDream's Llama, whose every layer the transformer reads, gets zero input
vectors and no output vectors (the family's `zeroed_output_embedding_parts`), as OneTrainer,
which marks it an output embedding but never applies its output vectors.

`Embeddings` (embeddings.py) installs one `OutputVectors` as the model's `output_embeddings`, so
training, samples and the sample tool all go through it; the files hold `<key>_out` (see
embedding_files.output_key).
"""

from __future__ import annotations

from typing import Any

import torch

from ..models.common import base_module


def output_width(model: Any, part: str) -> int:
    """The width of a text encoder's output sequence (CLIP, T5, Gemma and Llama: hidden_size)."""
    return int(base_module(model.parts[part]).config.hidden_size)


class OutputVectors:
    """The model's `output_embeddings` hook: `(part, input_ids, hidden) -> hidden` with each
    output embedding's rows put in at its tokens. `embeddings` is the live list of the run's
    embeddings (each with `outputs` {part: [tokens, width]} and `first_ids` {part: its first token id})."""

    def __init__(self, embeddings: list[Any]):
        self.embeddings = embeddings
        self.captured: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    def __call__(self, part: str, input_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        if self.captured is not None:
            self.captured[part] = (input_ids, hidden.detach())
        for embedding in self.embeddings:
            vector = embedding.outputs.get(part)
            if vector is None:
                continue
            if vector.shape[-1] != hidden.shape[-1]:
                raise ValueError(
                    f"{embedding.field}: its output vectors for the {part.replace('_', ' ')} have width {vector.shape[-1]}, "
                    f"but the encoder's output has {hidden.shape[-1]}: the embedding was made for another model type"
                )
            count = vector.shape[0]
            offset = input_ids.to(hidden.device) - embedding.first_ids[part]
            hit = (offset >= 0) & (offset < count)
            rows = vector.to(hidden.device, hidden.dtype)[offset.clamp(0, count - 1)]
            hidden = torch.where(hit.unsqueeze(-1), rows, hidden)
        return hidden


@torch.no_grad()
def initial_output_vectors(model: Any, hook: OutputVectors, embedding: Any, parts: list[str]) -> dict[str, torch.Tensor]:
    """The encoders' output rows (float32) at the embedding's tokens when its token string alone
    is encoded, its input vectors being those of the initial text, at the layer the rows are put
    in at. Not OneTrainer's rows (see the module's docstring): it encodes the initial text
    followed by '*'s at clip skip 0 and keeps the rows after the first, the same rows for CLIP
    (causal; the first row its start token) only at clip skip 0, and one token on for T5 (no start
    token), where they also see the rest of the text."""
    hook.captured = {}
    try:
        model.encode_text([embedding.token_string])
        captured = hook.captured
    finally:
        hook.captured = None
    out = {}
    count = len(embedding.tokens)
    for part in parts:
        if part not in captured:
            raise RuntimeError(f"the {type(model).__name__} family did not pass the {part}'s output through output_embedded")
        ids, hidden = captured[part]
        if hidden.is_meta:  # the memory planner's model on the meta device: the shape is all there is
            out[part] = torch.empty(count, hidden.shape[-1], device="meta")
            continue
        offset = ids[0].to(hidden.device) - embedding.first_ids[part]
        rows = hidden[0][(offset >= 0) & (offset < count)].float()
        if rows.shape[0] != count:
            raise ValueError(f"{embedding.field}.token_count: only {rows.shape[0]} of its {count} tokens fit in the {part.replace('_', ' ')}'s token window")
        out[part] = rows.clone()
    return out


def original_std(vector: torch.Tensor) -> float:
    """What `preserve_embedding_norm` keeps for output vectors (OneTrainer's
    original_output_vector_std): the mean over tokens of each row's standard deviation (1 for
    the memory planner's meta vectors, which have no values)."""
    return 1.0 if vector.is_meta else float(vector.detach().float().std(dim=1).mean())


@torch.no_grad()
def rescale(vector: torch.Tensor, std: float) -> None:
    """Scale trained output vectors back to the mean row deviation they started with."""
    vector.mul_(std / vector.float().std(dim=1).mean().clamp_min(1e-12))
