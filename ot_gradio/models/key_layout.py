"""What every family's key map shares: where a diffusers weight lives in a model's original
(single-file) layout, LoRA layer names, and writing such a layout atomically.

A `Place` names the original key, the rows of it a diffusers weight fills (fused q/k/v) and
whether its two halves are swapped; `to_layout` builds the original state dict from the places a
family's map gives (models/flux_keys.py, flux2_keys.py, z_image_keys.py). Families whose
original layout fuses an attention's q, k and v into one `attention.qkv` and renames a few other
keys (Z-Image, Ideogram 4) share `fused_qkv_name` / `fused_qkv_layout` / `fused_original`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from ot_gradio.models.common import save_safetensors


class Place(NamedTuple):
    """Where a diffusers weight lives in the original file: `key`, rows [start, start + rows) of
    it (None: the whole tensor) and `swap` (the two halves exchanged)."""

    key: str
    start: int | None = None
    rows: int | None = None
    swap: bool = False


class LayerName(str):
    """A LoRA layer name in a KOHYA_LORA / COMFY_LORA file (a value of a family's `lora_module_names()`)
    that also says how its rows lie in the original weight: `widths`, the row counts of the module
    paths given this name, in order (a fused weight of unequal parts, HunyuanVideo's `linear1` of
    q, k, v and the MLP; None: equal parts), and `swap` (the original's two halves exchanged, as
    `final_layer.adaLN_modulation.1`'s shift and scale); `aliases`, other programs' spellings of the
    same layer that reading accepts (OneTrainer's). It is the plain name everywhere else."""

    widths: tuple[int, ...] | None
    swap: bool
    aliases: tuple[str, ...]

    def __new__(cls, text: str, widths: Sequence[int] | None = None, swap: bool = False, aliases: Sequence[str] = ()) -> LayerName:
        out = super().__new__(cls, text)
        out.widths, out.swap = (tuple(int(w) for w in widths) if widths is not None else None), bool(swap)
        out.aliases = tuple(a for a in aliases if a != text)
        return out

    def spelled(self, text: str) -> LayerName:
        """Another spelling of this layer's name with the same rows."""
        return LayerName(text, self.widths, self.swap)


def fused_groups(names: Mapping[str, str]) -> dict[str, list[str]]:
    """Layer name -> the module paths given it, in order: more than one is a fused weight."""
    out: dict[str, list[str]] = {}
    for path, new in names.items():
        out.setdefault(new, []).append(path)
    return out


def layer_rows(name: str) -> tuple[tuple[int, ...] | None, bool]:
    """(widths, swap) of a layer name: (None, False) for a plain one."""
    return (name.widths, name.swap) if isinstance(name, LayerName) else (None, False)


LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight", ".lora_down.weight", ".lora_up.weight", ".alpha",
                 ".lora_magnitude_vector.weight", ".dora_scale")


def lora_layer(key: str) -> str:
    """The layer name of a LoRA weight key (its LoRA suffix cut off)."""
    for suffix in LORA_SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)]
    raise ValueError(f"LoRA key {key!r} is not a LoRA weight ComfyUI reads")


def kohya_paths(layout: Mapping[str, Place]) -> dict[str, str]:
    """OneTrainer/kohya layer names (`lora_transformer_<path with _>`) -> the diffusers path."""
    return {"lora_transformer_" + path.replace(".", "_"): path for path in layout}


def layer_paths(module: nn.Module) -> list[str]:
    """Module paths of the layers LoRA can wrap (linear and conv), whether wrapped already or not."""
    out = []
    for name, child in module.named_modules():
        if not name or ".lora_" in name or "base_layer" in name.split("."):
            continue
        if isinstance(child, (nn.Linear, nn.Conv2d)) or hasattr(child, "base_layer"):
            out.append(name)
    return out


def double_block_places(config, names: Mapping[str, str]) -> dict[str, Place]:
    """The Places of every double block of a Flux-style transformer (Flux.1 and Flux.2 alike):
    `transformer_blocks.N` is `double_blocks.N`, whose image and text q, k, v (`attn.to_q/k/v`,
    `attn.add_q/k/v_proj`) are the thirds of `img_attn.qkv` / `txt_attn.qkv`, and whose other
    layers are named by `names` (diffusers path in the block -> original path in the block)."""
    inner = int(config.num_attention_heads * config.attention_head_dim)
    out: dict[str, Place] = {}
    for i in range(int(config.num_layers)):
        src, dst = f"transformer_blocks.{i}", f"double_blocks.{i}"
        for fused, qkv in (("img_attn.qkv", ("to_q", "to_k", "to_v")), ("txt_attn.qkv", ("add_q_proj", "add_k_proj", "add_v_proj"))):
            out.update({f"{src}.attn.{name}": Place(f"{dst}.{fused}", j * inner, inner) for j, name in enumerate(qkv)})
        out.update({f"{src}.{a}": Place(f"{dst}.{b}") for a, b in names.items()})
    return out


def param_place(module_place: Place, param: str) -> Place:
    """A module's Place for one of its parameters: RMS norm weights are `scale` in BFL."""
    norm = module_place.key.endswith(("query_norm", "key_norm")) or ".norms." in module_place.key
    return module_place._replace(key=f"{module_place.key}.{'scale' if norm else param}")


def swap_halves(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


def to_layout(layout: Mapping[str, Place], state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None,
              model: str) -> dict[str, torch.Tensor]:
    """A diffusers state dict in the original layout `layout` gives (fused tensors concatenated
    in row order, swapped halves swapped); a weight with no place is an error naming `model`."""
    pieces: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for key, tensor in state_dict.items():
        module, _, param = key.rpartition(".")
        if module not in layout:
            raise ValueError(f"{model} transformer weight {key!r} has no place in the BFL layout (not a {model} transformer?)")
        place = param_place(layout[module], param)
        t = tensor.detach().to(dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype)
        t = t if t.device.type == "meta" else t.to("cpu")  # a meta state dict stays on meta (a layout check without weights)
        pieces.setdefault(place.key, []).append((place.start or 0, swap_halves(t) if place.swap else t))
    return {key: torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])], dim=0).contiguous() for key, parts in pieces.items()}


def save_tensors(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> Path:
    """`tensors` as a `.safetensors` file (format `pt`), written atomically."""
    path = Path(path)
    save_safetensors(dict(tensors), path, {"format": "pt", **metadata})
    return path


QKV = ("to_q", "to_k", "to_v")
Renames = Sequence[tuple[str, str]]


def fused_qkv_name(path: str, renames: Renames) -> str:
    """The original name of diffusers key or module `path`: `<block>.attention.to_q/k/v[.param]` ->
    `<block>.attention.qkv[.param]`; otherwise each (a, b) of `renames` replaces a with b (an `a`
    that starts with a dot anywhere, any other only at the start)."""
    head, dot, param = path.rpartition(".")
    for module, suffix in ((path, ""), (head, dot + param)):
        block, _, last = module.rpartition(".")
        if last in QKV and block.endswith(".attention"):
            return f"{block}.qkv{suffix}"
    for a, b in renames:
        path = path.replace(a, b) if path.startswith(a) or a.startswith(".") else path
    return path


def fused_qkv_layout(state_dict: Mapping[str, torch.Tensor], renames: Renames) -> dict[str, Place]:
    """diffusers key -> its Place in an original layout of fused q/k/v (their rows of `attention.qkv`,
    q then k then v) and `renames` for the other keys."""
    out: dict[str, Place] = {}
    for key in state_dict:
        module, _, param = key.rpartition(".")
        block, _, last = module.rpartition(".")
        if last in QKV and block.endswith(".attention"):
            rows = [state_dict[f"{block}.{n}.{param}"].shape[0] for n in QKV]
            i = QKV.index(last)
            out[key] = Place(f"{block}.qkv.{param}", sum(rows[:i]), rows[i])
        else:
            out[key] = Place(fused_qkv_name(key, renames))
    return out


def fused_original(state_dict: Mapping[str, torch.Tensor], renames: Renames, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """A diffusers transformer state dict in the original layout of `fused_qkv_layout` (q, k, v concatenated)."""
    pieces: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for key, place in fused_qkv_layout(state_dict, renames).items():
        t = state_dict[key].detach()
        t = t.to("cpu", dtype if dtype is not None and t.is_floating_point() else t.dtype)
        pieces.setdefault(place.key, []).append((place.start or 0, t))
    return {k: torch.cat([t for _, t in sorted(p, key=lambda x: x[0])]).contiguous() for k, p in pieces.items()}
