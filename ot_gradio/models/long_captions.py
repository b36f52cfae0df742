"""Captions past CLIP's 75 tokens for SD 1.x/2.x and SDXL (`max_token_length`, kohya's option).

CLIP reads 77 tokens: <BOS>, 75 of text, <EOS> (padded). With `max_token_length` 150 or 225 a
caption's tokens are cut into windows of 75, each encoded as a prompt of its own
(<BOS> window <EOS> padding), and the windows' hidden states are joined one after another along
the sequence, as A1111 and ComfyUI read a long prompt, so a LoRA trained on long captions meets
them the same way there. A run always reads the same number of windows (`max_token_length` / 75;
a caption's unused windows are empty prompts), so every caption's conditioning has one size, as
sd-scripts pads every caption to `max_token_length`. SDXL's pooled embedding is the first
window's, as in sd-scripts, A1111 and ComfyUI. (sd-scripts joins the windows without their inner
start and end tokens, 227 tokens for 225; the words each window reads are the same.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

CLIP_TEXT_TOKENS = 75


def windows_for(max_token_length: int | None) -> int:
    """How many 75-token windows `max_token_length` reads (1: CLIP's own window)."""
    return max(1, int(max_token_length or CLIP_TEXT_TOKENS) // CLIP_TEXT_TOKENS)


def window_ids(tokenizer: Any, texts: Sequence[str], windows: int) -> torch.Tensor:
    """Token ids [len(texts) * windows, 77]: each text's windows in order, each a whole prompt."""
    length = int(tokenizer.model_max_length)
    if windows <= 1:
        return tokenizer(list(texts), padding="max_length", max_length=length, truncation=True, return_tensors="pt").input_ids
    size = length - 2
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    rows = []
    for body in tokenizer(list(texts), add_special_tokens=False, truncation=False, verbose=False).input_ids:
        for start in range(0, size * windows, size):
            row = [bos, *body[start:start + size], eos]
            rows.append(row + [pad] * (length - len(row)))
    return torch.tensor(rows, dtype=torch.long)


def joined(hidden: torch.Tensor, windows: int) -> torch.Tensor:
    """[B * windows, 77, width] -> [B, windows * 77, width]: each text's windows side by side."""
    if windows <= 1:
        return hidden
    return hidden.reshape(hidden.shape[0] // windows, windows * hidden.shape[1], *hidden.shape[2:])
