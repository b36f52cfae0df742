"""Flux.1 key layouts: diffusers' FluxTransformer2DModel names <-> Black Forest Labs' original
names (the `flux1-dev.safetensors` layout that ComfyUI, Forge and the reference code use).

The rules (as in diffusers' scripts/convert_flux_to_diffusers.py, read the other way):
- `transformer_blocks.N` is `double_blocks.N`: the image stream's q, k, v (`attn.to_q/k/v`) are
  the three thirds of `img_attn.qkv`, the text stream's (`attn.add_q/k/v_proj`) of
  `txt_attn.qkv`; `attn.to_out.0` / `attn.to_add_out` are `img_attn.proj` / `txt_attn.proj`;
  `norm1(_context).linear` are `img_mod.lin` / `txt_mod.lin`; `ff(_context).net.0.proj` and
  `.net.2` are `img_mlp.0` / `.2` (`txt_mlp`); the q/k RMS norms are `*_attn.norm.query_norm.scale`
  / `key_norm.scale`.
- `single_transformer_blocks.N` is `single_blocks.N`: q, k, v and `proj_mlp` are stacked in
  that order in `linear1`; `proj_out` is `linear2`; `norm.linear` is `modulation.lin`.
- The embedders: `x_embedder` = `img_in`, `context_embedder` = `txt_in`,
  `time_text_embed.timestep_embedder` / `text_embedder` / `guidance_embedder` `.linear_1/2` =
  `time_in` / `vector_in` / `guidance_in` `.in_layer/out_layer`; `proj_out` =
  `final_layer.linear`; `norm_out.linear` = `final_layer.adaLN_modulation.1` with its two halves
  swapped (BFL: shift, scale; diffusers: scale, shift).

Chroma's original files use the same names, without the modulation layers (Chroma has none) and
with its approximator: `distilled_guidance_layer.in_proj` / `out_proj` keep their names,
`layers.N.linear_1/2` are `layers.N.in_layer/out_layer`, the RMS norms `norms.N` hold `scale`.

`bfl_layout(transformer)` gives every weight's place: the BFL key, the rows it fills (fused
q/k/v/mlp), and whether its halves swap. A LoRA on a diffusers layer therefore patches those rows
of that BFL weight, which is how ComfyUI applies `transformer.<diffusers path>` LoRA keys.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from ot_gradio.models.bfl_names import DOUBLE_ATTENTION, DOUBLE_NORMS, EMBEDDERS, SINGLE_NORMS
from ot_gradio.models.key_layout import (
    Place,
    double_block_places,
    kohya_paths,
    lora_layer,
    param_place,
    save_tensors,
    swap_halves,
    to_layout,
)

_DOUBLE = {
    **DOUBLE_ATTENTION,
    "norm1.linear": "img_mod.lin", "norm1_context.linear": "txt_mod.lin",
    "ff.net.0.proj": "img_mlp.0", "ff.net.2": "img_mlp.2",
    "ff_context.net.0.proj": "txt_mlp.0", "ff_context.net.2": "txt_mlp.2",
}
_SINGLE = {"proj_out": "linear2", "norm.linear": "modulation.lin"}
_TOP = {
    **EMBEDDERS,
    "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
    "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
    "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
}
_SWAPPED = {"norm_out.linear": "final_layer.adaLN_modulation.1"}


def bfl_module_layout(transformer) -> dict[str, Place]:
    """diffusers module path (weight-bearing modules only) -> its Place in the BFL layout, for
    this transformer's sizes; a fused module's Place names the rows of the BFL weight it fills."""
    config = transformer.config
    inner = int(config.num_attention_heads * config.attention_head_dim)
    out = double_block_places(config, {**_DOUBLE, **DOUBLE_NORMS})
    for i in range(int(config.num_single_layers)):
        src, dst = f"single_transformer_blocks.{i}", f"single_blocks.{i}"
        for j, name in enumerate(("to_q", "to_k", "to_v")):
            out[f"{src}.attn.{name}"] = Place(f"{dst}.linear1", j * inner, inner)
        mlp = transformer.single_transformer_blocks[i].proj_mlp.out_features
        out[f"{src}.proj_mlp"] = Place(f"{dst}.linear1", 3 * inner, mlp)
        out.update({f"{src}.{a}": Place(f"{dst}.{b}") for a, b in _SINGLE.items()})
        out.update({f"{src}.{a}": Place(f"{dst}.{b}") for a, b in SINGLE_NORMS.items()})
    out.update({a: Place(b) for a, b in _TOP.items()})
    out.update({a: Place(b, swap=True) for a, b in _SWAPPED.items()})
    approximator = getattr(transformer, "distilled_guidance_layer", None)  # Chroma
    if approximator is not None:
        root = "distilled_guidance_layer"
        out.update({f"{root}.in_proj": Place(f"{root}.in_proj"), f"{root}.out_proj": Place(f"{root}.out_proj")})
        for i in range(len(approximator.layers)):
            out[f"{root}.layers.{i}.linear_1"] = Place(f"{root}.layers.{i}.in_layer")
            out[f"{root}.layers.{i}.linear_2"] = Place(f"{root}.layers.{i}.out_layer")
            out[f"{root}.norms.{i}"] = Place(f"{root}.norms.{i}")
    return out


def to_bfl(transformer, state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None,
           model: str = "Flux.1") -> dict[str, torch.Tensor]:
    """The diffusers transformer state dict in the BFL layout (fused tensors concatenated)."""
    return to_layout(bfl_module_layout(transformer), state_dict, dtype, model)


def from_bfl(transformer, bfl: Mapping[str, torch.Tensor], model: str = "Flux.1") -> dict[str, torch.Tensor]:
    """A BFL-layout state dict (optionally under `model.diffusion_model.`) as the diffusers
    transformer's state dict; an error names a key that is missing or left over."""
    bfl = {k.removeprefix("model.diffusion_model."): v for k, v in bfl.items()}
    layout = bfl_module_layout(transformer)
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for key in transformer.state_dict():
        module, _, param = key.rpartition(".")
        place = param_place(layout[module], param)
        if place.key not in bfl:
            raise ValueError(f"The transformer file has no {place.key!r} (needed for {key}); is it a {model} transformer of this size?")
        t = bfl[place.key]
        if place.start is not None:
            t = t[place.start : place.start + place.rows]
        out[key] = swap_halves(t) if place.swap else t
        used.add(place.key)
    extra = sorted(set(bfl) - used)
    if extra:
        raise ValueError(f"The transformer file has keys a {model} transformer of this config does not: {extra[:3]}")
    return out


def save_bfl_transformer(path: str | os.PathLike, transformer, state_dict, dtype: torch.dtype | None, metadata: dict,
                         model: str = "Flux.1") -> Path:
    """The transformer alone as a BFL-layout `.safetensors`, written atomically."""
    return save_tensors(path, to_bfl(transformer, state_dict, dtype, model), metadata)


def load_bfl_transformer(path: str | os.PathLike, transformer) -> None:
    """Load a BFL-layout file's weights into `transformer` (built from the matching config)."""
    from safetensors.torch import load_file

    transformer.load_state_dict(from_bfl(transformer, load_file(str(path))), strict=True)


def comfy_lora_targets(transformer, lora_keys) -> dict[str, Place]:
    """For each LoRA layer of a diffusers-format Flux LoRA (`transformer.<path>.lora_A.weight`,
    `.lora_B.weight`, or OneTrainer/kohya `lora_transformer_<path with _>` names), the BFL weight
    (and rows) it patches, the way ComfyUI's Flux LoRA key map resolves them; a key no rule
    places raises ValueError naming it."""
    layout = bfl_module_layout(transformer)
    kohya = kohya_paths(layout)
    out: dict[str, Place] = {}
    for key in lora_keys:
        layer = lora_layer(key)
        if layer.startswith("transformer."):
            path = layer.removeprefix("transformer.")
        elif layer in kohya:
            path = kohya[layer]
        else:
            raise ValueError(f"LoRA key {key!r} names no Flux transformer layer")
        if path not in layout:
            raise ValueError(f"LoRA key {key!r}: ComfyUI has no BFL weight for the layer {path!r}")
        out[layer] = param_place(layout[path], "weight")
    return out
