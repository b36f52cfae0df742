"""Z-Image key layouts: diffusers' ZImageTransformer2DModel names <-> the original names (the
`z_image_turbo_bf16.safetensors` layout ComfyUI loads, the one diffusers' `from_single_file`
converts from), and where a diffusers-named LoRA lands in it.

The rules (diffusers' convert_z_image_transformer_checkpoint_to_diffusers, read both ways, and
ComfyUI's `z_image_to_diffusers`, which comfy/lora.py uses to place `transformer.<path>` LoRA keys):
- In every block (`layers.N`, `noise_refiner.N`, `context_refiner.N`): `attention.to_q/k/v` are
  the three row ranges of `attention.qkv` (q, then k, then v); `attention.to_out.0` is
  `attention.out`; the q/k RMS norms `attention.norm_q/k` are `attention.q_norm/k_norm`; the
  rest (`feed_forward.w1/w2/w3`, the four norms, `adaLN_modulation.0`) keep their names.
- `all_x_embedder.2-1` is `x_embedder`, `all_final_layer.2-1` is `final_layer`; the embedders
  and pad tokens keep their names. The original file may hold every key under
  `model.diffusion_model.` and an unused `norm_final.weight`; both are accepted on reading.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from ot_gradio.models.key_layout import Place, fused_original, fused_qkv_layout, lora_layer, save_tensors

_RENAMES = (
    ("all_x_embedder.2-1.", "x_embedder."),
    ("all_final_layer.2-1.", "final_layer."),
    (".attention.to_out.0.", ".attention.out."),
    (".attention.norm_q.", ".attention.q_norm."),
    (".attention.norm_k.", ".attention.k_norm."),
)


def original_layout(state_dict: Mapping[str, torch.Tensor]) -> dict[str, Place]:
    """diffusers key -> its Place in the original layout (q/k/v: their rows of the fused qkv)."""
    return fused_qkv_layout(state_dict, _RENAMES)


def to_original(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The diffusers transformer state dict in the original layout (q, k, v fused)."""
    return fused_original(state_dict, _RENAMES, dtype)


def save_original_transformer(path: str | os.PathLike, state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None,
                              metadata: Mapping[str, str]) -> Path:
    """The transformer alone as an original-layout `.safetensors` (what ComfyUI's diffusion
    model loader and diffusers' `ZImageTransformer2DModel.from_single_file` read), atomically."""
    return save_tensors(path, to_original(state_dict, dtype), metadata)


def comfy_lora_targets(transformer, lora_keys: Iterable[str]) -> dict[str, Place]:
    """For each layer of a diffusers-format Z-Image LoRA (`transformer.<path>.lora_A.weight`),
    the original weight (and rows) it patches, as ComfyUI's Z-Image key map places
    `transformer.<path>`; a key it cannot place raises ValueError naming it."""
    weights = {k.replace(".base_layer.", "."): v for k, v in transformer.state_dict().items() if ".lora_" not in k}
    layout = original_layout(weights)  # adapters already in the transformer are not weights of the file
    out: dict[str, Place] = {}
    for key in lora_keys:
        layer = lora_layer(key)
        if not layer.startswith("transformer."):
            raise ValueError(f"LoRA key {key!r} names no Z-Image transformer layer (ComfyUI reads transformer.<path>)")
        weight = layer.removeprefix("transformer.") + ".weight"
        if weight not in layout:
            raise ValueError(f"LoRA key {key!r}: ComfyUI has no original weight for the layer {weight!r}")
        out[layer] = layout[weight]
    return out
