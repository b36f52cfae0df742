"""A diffusers PixArt-α transformer -> PixArt's original key layout (one `.safetensors`).

This is what OneTrainer writes as a PixArt "SAFETENSORS" model and what PixArt's own code and
ComfyUI's PixArt loaders read: `blocks.N.attn.qkv` (query, key and value stacked in that order),
`blocks.N.cross_attn.kv_linear` (key and value), `t_block`, `y_embedder`, `x_embedder`,
`final_layer`, `csize_embedder` / `ar_embedder` on the 1024 model, and the fixed `pos_embed`.
The text encoder and VAE are not in it. Any diffusers key the mapping does not know raises, so
nothing is dropped silently.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import torch

# diffusers module path -> original module path (weights and biases alike)
_RENAMES = {
    "pos_embed.proj": "x_embedder.proj",
    "caption_projection.linear_1": "y_embedder.y_proj.fc1",
    "caption_projection.linear_2": "y_embedder.y_proj.fc2",
    "adaln_single.emb.timestep_embedder.linear_1": "t_embedder.mlp.0",
    "adaln_single.emb.timestep_embedder.linear_2": "t_embedder.mlp.2",
    "adaln_single.emb.resolution_embedder.linear_1": "csize_embedder.mlp.0",
    "adaln_single.emb.resolution_embedder.linear_2": "csize_embedder.mlp.2",
    "adaln_single.emb.aspect_ratio_embedder.linear_1": "ar_embedder.mlp.0",
    "adaln_single.emb.aspect_ratio_embedder.linear_2": "ar_embedder.mlp.2",
    "adaln_single.linear": "t_block.1",
    "proj_out": "final_layer.linear",
}
_BLOCK_RENAMES = {
    "attn1.to_out.0": "attn.proj",
    "attn2.to_q": "cross_attn.q_linear",
    "attn2.to_out.0": "cross_attn.proj",
    "ff.net.0.proj": "mlp.fc1",
    "ff.net.2": "mlp.fc2",
}
# original fused module -> the diffusers modules stacked into it, in order
_BLOCK_FUSED = {
    "attn.qkv": ("attn1.to_q", "attn1.to_k", "attn1.to_v"),
    "cross_attn.kv_linear": ("attn2.to_k", "attn2.to_v"),
}
_BLOCK = re.compile(r"transformer_blocks\.(\d+)\.(.+)\.(weight|bias)$")


def to_original_state_dict(state_dict: Mapping[str, torch.Tensor], pos_embed: torch.Tensor) -> dict[str, torch.Tensor]:
    """The original-layout state dict of a diffusers PixArt transformer's `state_dict`.
    `pos_embed` is the fixed sin-cos table (diffusers keeps it out of the state dict)."""
    out: dict[str, torch.Tensor] = {"pos_embed": pos_embed}
    fused: dict[str, dict[str, torch.Tensor]] = {}
    unknown = []
    for key, value in state_dict.items():
        if key == "scale_shift_table":
            out["final_layer.scale_shift_table"] = value
            continue
        block = _BLOCK.match(key)
        if block:
            n, module, kind = block.groups()
            if module in _BLOCK_RENAMES:
                out[f"blocks.{n}.{_BLOCK_RENAMES[module]}.{kind}"] = value
            elif any(module in parts for parts in _BLOCK_FUSED.values()):
                fused.setdefault(f"{n}.{kind}", {})[module] = value
            else:
                unknown.append(key)
            continue
        if key.startswith("transformer_blocks.") and key.endswith(".scale_shift_table"):
            out["blocks." + key.removeprefix("transformer_blocks.")] = value
            continue
        module, _, kind = key.rpartition(".")
        if module in _RENAMES:
            out[f"{_RENAMES[module]}.{kind}"] = value
        else:
            unknown.append(key)
    for where, pieces in fused.items():
        n, kind = where.split(".")
        for original, parts in _BLOCK_FUSED.items():
            present = [p for p in parts if p in pieces]
            if not present:
                continue
            if len(present) != len(parts):
                raise ValueError(f"Block {n} has only {present} of {list(parts)}; cannot build {original}.")
            out[f"blocks.{n}.{original}.{kind}"] = torch.cat([pieces[p] for p in parts], dim=0)
    if unknown:
        raise ValueError(f"Unknown PixArt transformer weights (not converted): {unknown[:5]}")
    return out


def save_original_transformer(path: str | os.PathLike, transformer: torch.nn.Module, state_dict: Mapping[str, torch.Tensor],
                              dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None) -> Path:
    """Write `state_dict` (the transformer's, without LoRA layers) in the original layout, atomically."""
    from ot_gradio.models.common import cast_state_dict
    from ot_gradio.models.key_layout import save_tensors

    pos_embed = transformer.pos_embed.pos_embed.detach()
    return save_tensors(path, cast_state_dict(to_original_state_dict(state_dict, pos_embed), dtype), metadata or {})
