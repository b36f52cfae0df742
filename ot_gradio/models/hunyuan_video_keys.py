"""HunyuanVideo's transformer in its original layout (Tencent's checkpoints, the files ComfyUI loads,
e.g. `hunyuan_video_720_cfgdistill_bf16.safetensors`, and city96's GGUF files): the names diffusers'
`convert_hunyuan_video_transformer_to_diffusers` reads, written from diffusers' names. The layers
are named by comfy_lora_names.py's HunyuanVideo tables (the original repository's spelling of
ComfyUI's names); q, k, v (and the single blocks' MLP input) are one fused weight each, and the
final modulation keeps (scale, shift) where diffusers keeps (shift, scale). Read back: those
names, or ComfyUI's spelling of them (a model ComfyUI saved), through diffusers' converter."""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from ot_gradio.models.comfy_lora_names import (
    HUNYUAN_SWAPPED,
    hunyuan_video_onetrainer,
    hunyuan_video_original,
    hunyuan_video_row_order,
)
from ot_gradio.models.key_layout import swap_halves

# the weights of modules that are no Linear layer (the LoRA tables name the Linear ones)
_OTHER = (
    (re.compile(r"^transformer_blocks\.(\d+)\.attn\.norm_(q|k)$"), r"double_blocks.\1.img_attn_\2_norm"),
    (re.compile(r"^transformer_blocks\.(\d+)\.attn\.norm_added_(q|k)$"), r"double_blocks.\1.txt_attn_\2_norm"),
    (re.compile(r"^single_transformer_blocks\.(\d+)\.attn\.norm_(q|k)$"), r"single_blocks.\1.\2_norm"),
    (re.compile(r"^context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.(norm[12])$"), r"txt_in.individual_token_refiner.blocks.\1.\2"),
    (re.compile(r"^x_embedder\.proj$"), "img_in.proj"),
)
_PREFIXES = ("model.diffusion_model.", "model.model.", "diffusion_model.")  # ComfyUI's saved models and LoRA-style keys
# ComfyUI's own spelling (the names its HunyuanVideo model has, in a file ComfyUI saved) of the norms
_COMFY_NORMS = (("_attn.norm.query_norm.scale", "_attn_q_norm.weight"), ("_attn.norm.key_norm.scale", "_attn_k_norm.weight"),
                (".norm.query_norm.scale", ".q_norm.weight"), (".norm.key_norm.scale", ".k_norm.weight"))


def original_module(path: str) -> str:
    """The original checkpoint's name of diffusers module `path` (a fused weight's members share one)."""
    if comfy := hunyuan_video_original(path):
        return hunyuan_video_onetrainer(comfy)
    for pattern, name in _OTHER:
        if pattern.match(path):
            return pattern.sub(name, path)
    raise ValueError(f"HunyuanVideo transformer module {path!r} has no name in the original layout (not a HunyuanVideo transformer?)")


def original_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Diffusers' HunyuanVideo transformer weights under the original names, fused weights
    concatenated in row order, the final modulation's halves swapped."""
    members: dict[str, list[str]] = {}
    for key in state_dict:
        module, _, param = key.rpartition(".")
        members.setdefault(f"{original_module(module)}.{param}", []).append(key)
    out = {}
    for name, keys in members.items():
        keys.sort(key=lambda k: hunyuan_video_row_order(k.rpartition(".")[0]))
        tensor = torch.cat([state_dict[k] for k in keys]) if len(keys) > 1 else state_dict[keys[0]]
        out[name] = swap_halves(tensor) if keys[0].rpartition(".")[0] in HUNYUAN_SWAPPED else tensor
    return out


def from_comfy_spelling(key: str) -> str:
    """The original repository's name of a key as ComfyUI's HunyuanVideo model spells it
    (`img_attn.qkv`, `img_mod.lin`, `img_attn.norm.query_norm.scale`, `time_in.in_layer`)."""
    for comfy, original in _COMFY_NORMS:
        if key.endswith(comfy):
            return key[: -len(comfy)] + original
    module, _, param = key.rpartition(".")
    return f"{hunyuan_video_onetrainer(module)}.{param}"


def diffusers_state_dict(original: Mapping[str, torch.Tensor], hidden_size: int) -> dict[str, torch.Tensor]:
    """An original-layout state dict (the original repository's names or ComfyUI's, bare or under
    a ComfyUI prefix) in diffusers' names: diffusers' own converter, but the single blocks' `linear1`
    split here at the model's `hidden_size` (the converter assumes the full model's 3072)."""
    from diffusers.loaders.single_file_utils import convert_hunyuan_video_transformer_to_diffusers

    bare = {}
    for key, tensor in original.items():
        for prefix in _PREFIXES:
            key = key.removeprefix(prefix)
        bare[key] = tensor
    if any("_mod.lin." in k or ".modulation.lin." in k for k in bare):  # every block has one: ComfyUI's spelling
        bare = {from_comfy_spelling(k): v for k, v in bare.items()}
    rest, linear1 = {}, {}
    for key, tensor in bare.items():
        (linear1 if re.match(r"^single_blocks\.\d+\.linear1\.", key) else rest)[key] = tensor
    out = convert_hunyuan_video_transformer_to_diffusers(rest)
    for key, tensor in linear1.items():
        block, _, param = key.replace("single_blocks.", "single_transformer_blocks.", 1).rpartition(".linear1.")
        if tensor.shape[0] <= 3 * hidden_size:
            raise ValueError(f"The transformer file's {key} has {tensor.shape[0]} rows, not q, k, v of {hidden_size} and an MLP: "
                             "is it a HunyuanVideo transformer of this size?")
        q, k, v, mlp = torch.split(tensor, [hidden_size] * 3 + [tensor.shape[0] - 3 * hidden_size])
        out.update({f"{block}.attn.to_q.{param}": q, f"{block}.attn.to_k.{param}": k, f"{block}.attn.to_v.{param}": v,
                    f"{block}.proj_mlp.{param}": mlp})
    return out
