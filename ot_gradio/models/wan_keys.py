"""Wan's transformer in its original layout (Wan-AI's checkpoints, the files ComfyUI loads): the
names diffusers' `convert_wan_transformer_to_diffusers` reads, written from diffusers' names. The
one-transformer models (Wan 2.1, Wan 2.1 I2V, Wan 2.2 TI2V 5B) only; diffusers reads such a file back through
`from_single_file` (tests/models/test_wan_family.py checks the round trip with its converter)."""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

# diffusers -> original, applied in this order to each key (diffusers' rename table read backwards)
RENAMES = (
    ("condition_embedder.time_embedder.linear_1.", "time_embedding.0."),
    ("condition_embedder.time_embedder.linear_2.", "time_embedding.2."),
    ("condition_embedder.text_embedder.linear_1.", "text_embedding.0."),
    ("condition_embedder.text_embedder.linear_2.", "text_embedding.2."),
    ("condition_embedder.time_proj.", "time_projection.1."),
    (".attn1.", ".self_attn."), (".attn2.", ".cross_attn."),
    (".to_out.0.", ".o."), (".to_q.", ".q."), (".to_k.", ".k."), (".to_v.", ".v."),
    (".add_k_proj.", ".k_img."), (".add_v_proj.", ".v_img."), (".norm_added_k.", ".norm_k_img."),
    (".ffn.net.0.proj.", ".ffn.0."), (".ffn.net.2.", ".ffn.2."),
    ("proj_out.", "head.head."),
    # Wan 2.1 I2V's projection of the CLIP image embeddings
    ("condition_embedder.image_embedder.norm1.", "img_emb.proj.0."),
    ("condition_embedder.image_embedder.ff.net.0.proj.", "img_emb.proj.1."),
    ("condition_embedder.image_embedder.ff.net.2.", "img_emb.proj.3."),
    ("condition_embedder.image_embedder.norm2.", "img_emb.proj.4."),
)
_NORM = re.compile(r"^(blocks\.\d+\.)norm([23])\.")  # diffusers' norm2 is the original norm3 and the other way round


def original_name(key: str) -> str:
    """The original checkpoint's name of diffusers key `key`."""
    if key == "scale_shift_table":
        return "head.modulation"
    if key.endswith(".scale_shift_table"):
        return key[: -len("scale_shift_table")] + "modulation"
    key = _NORM.sub(lambda m: f"{m.group(1)}norm{'3' if m.group(2) == '2' else '2'}.", key)
    for a, b in RENAMES:
        key = key.replace(a, b) if a.startswith(".") else (b + key[len(a):] if key.startswith(a) else key)
    return key


def original_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Diffusers' Wan transformer weights under the original names."""
    out = {original_name(k): v for k, v in state_dict.items()}
    if len(out) != len(state_dict):
        raise ValueError("two Wan transformer weights map to one original name")
    return out
