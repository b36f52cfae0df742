"""Flux.2 key layouts: diffusers' Flux2Transformer2DModel names <-> Black Forest Labs' original
names (the `flux2-dev.safetensors` / Klein layout that ComfyUI's diffusion-model loader reads).

The rules (diffusers' convert_flux2_transformer_checkpoint_to_diffusers read the other way, and
OneTrainer's Flux2Model.diffusers_to_original):
- `transformer_blocks.N` is `double_blocks.N`: `attn.to_q/k/v` are the thirds of `img_attn.qkv`,
  `attn.add_q/k/v_proj` of `txt_attn.qkv`; `attn.to_out.0` / `attn.to_add_out` are
  `img_attn.proj` / `txt_attn.proj`; `ff(_context).linear_in/out` are `img_mlp.0/2`
  (`txt_mlp`); the q/k RMS norms are `*_attn.norm.query_norm/key_norm.scale`. Flux.2 blocks
  have no modulation of their own.
- `single_transformer_blocks.N` is `single_blocks.N`: `attn.to_qkv_mlp_proj` is `linear1`
  (fused in both layouts), `attn.to_out` is `linear2`, norms `norm.query_norm/key_norm.scale`.
- Shared: `x_embedder` = `img_in`, `context_embedder` = `txt_in`, `time_guidance_embed.
  timestep_embedder` / `guidance_embedder` `.linear_1/2` = `time_in` / `guidance_in`
  `.in_layer/out_layer`, the three modulations `*.linear` = `*.lin`, `proj_out` =
  `final_layer.linear`, `norm_out.linear` = `final_layer.adaLN_modulation.1` with its halves
  swapped.

ComfyUI's Flux.2 model is a subclass of its Flux model, so its LoRA key map is the Flux one
(comfy/lora.py over comfy/utils.py `flux_to_diffusers`, which knows the Flux.2 block names
`ff.linear_in/out`, `attn.to_qkv_mlp_proj`, `attn.to_out`): `transformer.<diffusers path>`
(diffusers/PEFT files) and `lora_transformer_<path with _>` (OneTrainer's COMFY_LORA) name a
diffusers layer, which patches its rows of the BFL weight. That map has no entry for Flux.2's
`time_guidance_embed.*` and its three shared modulations, so ComfyUI skips LoRA layers named so
there; kohya files name those layers (and the blocks' MLPs) by their original keys instead
(`lora_unet_double_stream_modulation_img_lin`, models/comfy_lora_names.py), which every ComfyUI maps.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from ot_gradio.models.flux2_names import COMFY_UNMAPPED, DOUBLE, SINGLE, TOP
from ot_gradio.models.key_layout import Place, double_block_places, kohya_paths, lora_layer, param_place, save_tensors, to_layout


def module_layout(transformer) -> dict[str, Place]:
    """diffusers module path -> its Place in the BFL layout, for this transformer's sizes."""
    config = transformer.config
    out = double_block_places(config, DOUBLE)
    for i in range(int(config.num_single_layers)):
        out.update({f"single_transformer_blocks.{i}.{a}": Place(f"single_blocks.{i}.{b}") for a, b in SINGLE.items()})
    out.update({a: Place(b) for a, b in TOP.items()})
    out["norm_out.linear"] = Place("final_layer.adaLN_modulation.1", swap=True)
    return out


def to_original(transformer, state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The diffusers transformer state dict in the BFL layout (q, k, v concatenated)."""
    return to_layout(module_layout(transformer), state_dict, dtype, "Flux.2")


def save_original_transformer(path: str | os.PathLike, transformer, state_dict, dtype: torch.dtype | None, metadata: dict) -> Path:
    """The transformer alone as a BFL-layout `.safetensors` (ORIGINAL_TRANSFORMER), written atomically."""
    return save_tensors(path, to_original(transformer, state_dict, dtype), metadata)


def comfy_lora_targets(transformer, lora_keys: Iterable[str]) -> dict[str, Place]:
    """For each LoRA layer (`transformer.<path>...`, `lora_transformer_<path with _>...` or
    `lora_unet_<original key with _>`, ComfyUI's rule for every model's whole weights), the BFL
    weight (and rows) it patches, as ComfyUI's key map resolves it; a key no rule places raises
    ValueError naming it."""
    layout = module_layout(transformer)
    kohya = kohya_paths(layout)
    whole = {"lora_unet_" + p.key.replace(".", "_"): p for p in layout.values() if p.start is None and not p.swap}
    out: dict[str, Place] = {}
    for key in lora_keys:
        layer = lora_layer(key)
        if layer in whole:
            out[layer] = param_place(whole[layer], "weight")
            continue
        path = layer.removeprefix("transformer.") if layer.startswith("transformer.") else kohya.get(layer)
        if path is None or path not in layout:
            raise ValueError(f"LoRA key {key!r}: ComfyUI has no Flux.2 weight for this layer")
        if path.startswith(COMFY_UNMAPPED):
            raise ValueError(f"LoRA key {key!r}: ComfyUI's Flux key map has no entry for {path} and skips it; train the "
                             "blocks only (layer filter preset 'blocks' or 'attn-mlp')")
        out[layer] = param_place(layout[path], "weight")
    return out
