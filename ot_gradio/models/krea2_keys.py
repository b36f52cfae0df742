"""Krea 2's native transformer layout (krea/Krea-2-Raw's `raw.safetensors`, what diffusers'
`Krea2Transformer2DModel.from_single_file` converts): diffusers' names renamed back, each block's
(6, width) modulation table stored flat, as OneTrainer's Krea2Model.diffusers_to_original does."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

# diffusers prefix -> native prefix (the first that matches), then renames inside every block
PREFIXES = (
    ("img_in.", "first."), ("time_embed.linear_1.", "tmlp.0."), ("time_embed.linear_2.", "tmlp.2."),
    ("time_mod_proj.", "tproj.1."), ("txt_in.norm.weight", "txtmlp.0.scale"), ("txt_in.linear_1.", "txtmlp.1."),
    ("txt_in.linear_2.", "txtmlp.3."), ("text_fusion.", "txtfusion."), ("transformer_blocks.", "blocks."),
    ("final_layer.linear.", "last.linear."), ("final_layer.norm.weight", "last.norm.scale"),
    ("final_layer.scale_shift_table", "last.modulation.lin"),
)
IN_BLOCKS = (
    (".attn.to_q.", ".attn.wq."), (".attn.to_k.", ".attn.wk."), (".attn.to_v.", ".attn.wv."), (".attn.to_out.0.", ".attn.wo."),
    (".attn.to_gate.", ".attn.gate."), (".attn.norm_q.weight", ".attn.qknorm.qnorm.scale"),
    (".attn.norm_k.weight", ".attn.qknorm.knorm.scale"), (".ff.", ".mlp."), (".norm1.weight", ".prenorm.scale"),
    (".norm2.weight", ".postnorm.scale"), (".scale_shift_table", ".mod.lin"),
)


def native_name(key: str) -> str:
    for old, new in PREFIXES:
        if key.startswith(old):
            key = new + key[len(old):]
            break
    for old, new in IN_BLOCKS:
        key = key.replace(old, new)
    return key


def to_native(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The transformer's diffusers state dict in the native layout (floating weights in `dtype`)."""
    out = {}
    for key, value in state_dict.items():
        if key.startswith("transformer_blocks.") and key.endswith(".scale_shift_table"):
            value = value.reshape(-1)
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        out[native_name(key)] = value.contiguous()
    return out


def save_native_transformer(path: str | os.PathLike, state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None,
                            metadata: Mapping[str, str]) -> Path:
    """The transformer alone as a native-layout `.safetensors`, written atomically."""
    from ot_gradio.models.key_layout import save_tensors

    return save_tensors(path, to_native(state_dict, dtype), metadata)
