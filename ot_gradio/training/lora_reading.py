"""Reading LoRA files (lora_format.py's layouts, and other tools'), into peft-form parts, one rank
and one alpha: what *Base LoRA* (`lora_model_name`), the converter and sampling with a LoRA load.

kohya names (`lora_unet_...`, `lora_te1_...`), whole layer names (a family's renames,
models/comfy_lora_names.py, and the names of its original layout, models/original_lora_names.py:
a fused weight read as its members' rows), and diffusers/PEFT keys (`transformer.<path>.lora_A.weight`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

from ot_gradio import jsontext
from ot_gradio.models.comfy_lora_names import is_full_name
from ot_gradio.models.key_layout import LayerName, layer_rows
from ot_gradio.training.lora_fusion import split_layer, swap_halves
from ot_gradio.training.lora_layer_entries import (
    check_layer,
    describe,
    from_kohya,
    is_unit_scale,
    layer_rank,
    scale_layer,
    split_key,
)
from ot_gradio.training.lora_names import (
    _DIFFUSERS_METADATA_KEY,
    _KOHYA_PREFIX,
    _TEXT_PARTS,
    COMFY_PREFIX,
    FOLDED_ALPHA_KEY,
    _split_layers,
    _strip_text_model,
    kohya_read_prefixes,
    module_path_from_kohya,
)


class LoadedLora(NamedTuple):
    parts: dict[str, dict[str, torch.Tensor]]
    rank: int
    alpha: float


def read_lora_metadata(path: str | os.PathLike) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def load_lora_file(
    path: str | os.PathLike, module_names: Mapping[str, Mapping[str, str]] | None = None, denoiser: str = "unet",
    read_names: Mapping[str, Sequence[tuple[str, str]]] | None = None, base_model_version: str = "",
) -> LoadedLora:
    """Read a kohya or diffusers/PEFT LoRA into peft-form parts, one rank and one alpha.

    Layers whose alpha differs from the most common one get that difference folded into their
    up weights, so `alpha / rank` scaling with the returned alpha reproduces the file exactly.
    `module_names` are the renames the file was written with (`save_lora_parts`); kohya layer
    names made with them map back to the model's module paths. `lora_unet_` layers belong to
    the model's `denoiser` part (Qwen-Image's transformer is written so). `read_names` are
    whole layer names other tools write (models/original_lora_names.py) -> the (part, module
    path)s each covers, read as well; `base_model_version` picks the kohya prefixes (lora_names.kohya_read_prefixes).
    """
    from safetensors.torch import load_file

    # embeddings bundled in the file (`bundle_emb.*`) are not LoRA layers
    tensors = {k: v for k, v in load_file(str(path)).items() if not k.startswith("bundle_emb.")}
    metadata = read_lora_metadata(path)
    if not tensors:
        raise ValueError(f"{path} holds no tensors.")
    diff = [k for k in tensors if k.endswith((".diff", ".diff_b"))]
    if diff:  # ComfyUI's trainer's whole-weight (bias) differences: no low-rank factors to continue
        raise ValueError(f"{path}: {len(diff)} entries are whole weight differences ({diff[0]}; ComfyUI's `.diff` / "
                         "`.diff_b`), not LoRA factors: they cannot continue as a LoRA.")
    full = _full_names(module_names or {})
    full = {**{k: v for k, v in (read_names or {}).items() if k not in full}, **full}
    full.update(_denoiser_paths(tensors, full, denoiser))
    # a family whose kohya names are whole module paths (PixArt's `transformer.…`) shares them with
    # its diffusers layout: peft's lora_A / lora_B entries tell the diffusers layout apart
    peft_entries = any(k.endswith((".lora_A.weight", ".lora_B.weight", ".lora_magnitude_vector")) for k in tensors)
    if peft_entries and all(_full_layer(k, full) and k.split(".", 1)[0] not in _KOHYA_PREFIX for k in tensors):
        # whole layer names with peft's lora_A / lora_B entries (ComfyUI's `diffusion_model.` names: OneTrainer's
        # COMFY_LORA, ai-toolkit, musubi-tuner convert_lora --target other; OneTrainer's ORIGINAL_LORA)
        tensors = {k.replace(".lora_A.weight", ".lora_down.weight").replace(".lora_B.weight", ".lora_up.weight"): v
                   for k, v in tensors.items()}
        peft_entries = False
    if not peft_entries and all(k.startswith(_KOHYA_STARTS) or _full_layer(k, full) for k in tensors):
        layers = _layers_from_kohya(tensors, module_names or {}, full, denoiser, kohya_read_prefixes(base_model_version))
    elif all(k.split(".", 1)[0] in _KOHYA_PREFIX for k in tensors):
        layers = _layers_from_diffusers(tensors, metadata)
    else:
        sample = [k for k in tensors if not (k.startswith(_KOHYA_STARTS) or _full_layer(k, full))][:3]
        raise ValueError(f"{path}: neither a kohya LoRA (lora_unet_..., lora_te1_...), a ComfyUI one (diffusion_model....) "
                         f"nor a diffusers/PEFT one (transformer...., unet...., text_encoder....); keys like {sample}.")
    default_rank = int(metadata["ss_network_dim"]) if metadata.get("ss_network_dim", "").isdigit() else None
    try:
        default_alpha = float(metadata["ss_network_alpha"]) if "ss_network_alpha" in metadata else None
    except ValueError:
        default_alpha = None
    return _fold_alphas(layers, default_rank, default_alpha)


# (part, module path) -> (peft-form tensors, alpha or None, read from a kohya file)
_Layers = dict[tuple[str, str], tuple[dict[str, torch.Tensor], float | None, bool]]


def _layers_from_kohya(
    tensors: Mapping[str, torch.Tensor], module_names: Mapping[str, Mapping[str, str]],
    full: Mapping[str, Sequence[tuple[str, str]]], denoiser: str, prefixes: Mapping[str, str],
) -> _Layers:
    renamed = {  # a layer now written under a whole name still reads back from its old `_`-joined path
        (part, (path if is_full_name(new) else new).replace(".", "_")): path
        for part, names in module_names.items() for path, new in names.items()
    }
    spelled = {str(name): name for name in full}  # the names with their rows (models/key_layout.py LayerName)
    names: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        name = _full_layer(key, full) or key.partition(".")[0]
        names.setdefault(name, {})[key[len(name) + 1 :]] = tensor
    layers: _Layers = {}
    for name, entries in names.items():
        peft_form, alpha = from_kohya(name, entries)
        if name in full:
            members = full[name]
            widths, swap = layer_rows(spelled.get(name, name))
            peft_form = swap_halves(name, peft_form) if swap else peft_form
            split = split_layer(name, peft_form, alpha, len(members), widths) if len(members) > 1 else [(peft_form, alpha)]
            for member, got in zip(members, split, strict=True):
                if got is not None:  # None: a member our writer filled with zeros (not trained)
                    layers[member] = (*got, True)
            continue
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None:
            raise ValueError(f"Unknown kohya LoRA prefix in {name!r}.")
        part = prefixes[prefix]
        part = denoiser if part == "unet" else part
        flat = name.removeprefix(prefix)
        path = renamed.get((part, flat)) or _strip_text_model(part, module_path_from_kohya(flat))
        layers[(part, path)] = (peft_form, alpha, True)
    return layers


# kohya names, and LyCORIS's own (`lycoris_<denoiser path>`, SimpleTuner's LyCORIS files)
_KOHYA_STARTS = ("lora_", "lycoris_")
# the entries of one layer in kohya / LyCORIS files besides those peft names (lora_variants.PARAM_NAMES)
_KOHYA_ENTRIES = ("lora_down.weight", "lora_up.weight", "alpha", "lora_magnitude_vector.weight")


def _layer_of(key: str) -> str | None:
    """The layer name of a file's entry (`<layer>.lora_down.weight` -> `<layer>`), None for an unknown entry."""
    for entry in _KOHYA_ENTRIES:
        if key.endswith("." + entry):
            return key[: -len(entry) - 1]
    hit = split_key(key)
    return hit[0] if hit else None


def _denoiser_paths(tensors: Mapping[str, torch.Tensor], full: Mapping[str, object], denoiser: str) -> dict[str, list[tuple[str, str]]]:
    """Layers no whole name covers, named `diffusion_model.<path>` or bare `<path>`: the denoiser's module
    `<path>` (ComfyUI reads such keys for any model whose own names are diffusers', as Qwen-Image's;
    ai-toolkit writes `diffusion_model.`, Qwen-Image-Lightning bare names)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for key in tensors:
        if key.startswith(_KOHYA_STARTS) or key.split(".", 1)[0] in _KOHYA_PREFIX or key.startswith("text_encoders."):
            continue
        if not _full_layer(key, full) and (layer := _layer_of(key)):
            out[layer] = [(denoiser, layer.removeprefix(COMFY_PREFIX))]
    return out


def _full_names(module_names: Mapping[str, Mapping[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Whole layer names among the renames (models/comfy_lora_names.py) -> the (part, module path)
    it names: several for a fused q/k/v, in their order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for part, names in module_names.items():
        for path, new in names.items():
            if is_full_name(new):
                for spelling in (new, *(new.spelled(a) for a in new.aliases)) if isinstance(new, LayerName) else (new,):
                    out.setdefault(spelling, []).append((part, path))
    # ComfyUI reads `lora_unet_<original key with _>` as `diffusion_model.<original key>` (OneTrainer's KOHYA_LORA)
    aliases = {_spelled(new, "lora_unet_" + new.removeprefix(COMFY_PREFIX).replace(".", "_")): members
               for new, members in out.items() if new.startswith(COMFY_PREFIX)}
    return {**aliases, **out}


def _spelled(name: str, text: str) -> str:
    return name.spelled(text) if isinstance(name, LayerName) else text


def _full_layer(key: str, full: Mapping[str, object]) -> str | None:
    """The whole layer name `key` is an entry of (dotted names hold dots themselves), or None."""
    i = key.find(".")
    while i != -1:
        if key[:i] in full:
            return key[:i]
        i = key.find(".", i + 1)
    return None


def _layers_from_diffusers(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> _Layers:
    by_part: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        part, _, rest = key.partition(".")
        by_part.setdefault(part, {})[rest] = tensor
    adapter_meta = jsontext.loads(metadata[_DIFFUSERS_METADATA_KEY]) if _DIFFUSERS_METADATA_KEY in metadata else {}
    trained_alpha = float(metadata[FOLDED_ALPHA_KEY]) if FOLDED_ALPHA_KEY in metadata else None
    # kohya's header alpha is only ours to trust (written beside the fold); converters (sd-scripts
    # convert_flux_lora.py, musubi-tuner convert_lora.py) fold alpha into the weights and keep the
    # source's ss_network_alpha: diffusers and ComfyUI read such a file at alpha = rank, as here
    file_alpha = float(metadata["ss_network_alpha"]) if "ss_network_alpha" in metadata and trained_alpha is not None else None

    layers: _Layers = {}
    for part, sd in by_part.items():
        sd = {k.removesuffix(".weight") if k.endswith(".lora_magnitude_vector.weight") else k: v for k, v in sd.items()}
        # a layer's own `.alpha` (ai-toolkit's LoKr, OneTrainer's LoHa/LoKr with diffusers keys): LyCORIS's
        # alpha / rank for that layer, as ComfyUI reads it
        own_alpha = {k.removesuffix(".alpha"): float(v.item()) for k, v in sd.items() if k.endswith(".alpha")}
        sd = {k: v for k, v in sd.items() if not k.endswith(".alpha")}
        if not all(split_key(k) for k in sd):  # the 2023 attention-processor layout
            from diffusers.utils.state_dict_utils import StateDictType, convert_state_dict_to_peft, convert_unet_state_dict_to_peft

            if part in _TEXT_PARTS:
                sd = convert_state_dict_to_peft(dict(sd), original_type=StateDictType.DIFFUSERS_OLD)
            else:
                sd = convert_unet_state_dict_to_peft(dict(sd))
        alpha = adapter_meta.get(f"{part}.lora_alpha", adapter_meta.get(f"{part}.alpha", file_alpha))
        for path, tensors in _split_layers(part, sd).items():
            if path in own_alpha:
                layers[(part, _strip_text_model(part, path))] = (tensors, own_alpha[path], True)
                continue
            layer_alpha = None if alpha is None else float(alpha)
            if trained_alpha is not None:  # undo the writer's fold: the same delta at the trained alpha
                read_alpha = layer_alpha if layer_alpha is not None else float(adapter_meta.get(f"{part}.r") or layer_rank(tensors) or 1)
                file_scale = read_alpha / trained_alpha
                tensors, layer_alpha = scale_layer(tensors, file_scale), trained_alpha
            layers[(part, _strip_text_model(part, path))] = (tensors, layer_alpha, False)
    return layers


# every low-rank product of a layer: (up, down, Tucker core). The rank is the up's axis 1 and the down's
# axis 0; in Tucker form (the core present: LyCORIS' use_tucker on a kxk convolution) axis 0 of both
# and axes 0 and 1 of the core (delta = core contracted with up and down on those axes)
_RANK_PAIRS = (
    ("lora_B.weight", "lora_A.weight", None),
    ("hada_w1_a", "hada_w1_b", "hada_t1"),
    ("hada_w2_a", "hada_w2_b", "hada_t2"),
    ("lokr_w1_a", "lokr_w1_b", None),
    ("lokr_w2_a", "lokr_w2_b", "lokr_t2"),
)


def _widths(tensors: Mapping[str, torch.Tensor]) -> set[int]:
    """The ranks of a layer's low-rank products (none for OFT, or a LoKr layer of two whole matrices)."""
    return {int(tensors[down].shape[0]) for _, down, _ in _RANK_PAIRS if down in tensors}


def _zero_padded(t: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    return torch.cat([t, t.new_zeros((*t.shape[:axis], size - t.shape[axis], *t.shape[axis + 1 :]))], dim=axis)


def _pad_rank(tensors: dict[str, torch.Tensor], alpha: float | None, rank: int) -> tuple[dict[str, torch.Tensor], float | None]:
    """A LoRA, LoHa or LoKr layer at a larger `rank`: zero rows of each down factor and columns of each up
    one (in Tucker form zero rows of both and a zero border on the core), alpha scaled by the same factor,
    so alpha / rank and the delta stay exactly the file's (sd-scripts' conv_dim, LyCORIS' conv_dim for
    LoHa and LoKr, peft's rank_pattern, a fused q/k/v of three times the rank); the zero part stays zero
    while it trains (its gradient is a product with zeros). The layer's own rank, for its scale, is
    `layer_rank`'s: LoKr's w1 product's when both factors are products, as LyCORIS takes it. A LoKr layer
    of two whole matrices has no rank (scale 1 in LyCORIS and ComfyUI, whatever its alpha): unchanged."""
    r = layer_rank(tensors)
    if r is None or _widths(tensors) == {rank}:
        return tensors, alpha
    out = dict(tensors)
    for up, down, core in _RANK_PAIRS:
        if down not in tensors or up not in tensors:  # an incomplete layer: check_layer names it
            continue
        tucker = core is not None and core in tensors
        out[down] = _zero_padded(tensors[down], 0, rank)
        out[up] = _zero_padded(tensors[up], 0 if tucker else 1, rank)
        if tucker:
            out[core] = _zero_padded(_zero_padded(tensors[core], 0, rank), 1, rank)
    return out, (float(r) if alpha is None else alpha) * rank / r


def _fold_alphas(layers: _Layers, default_rank: int | None = None, default_alpha: float | None = None) -> LoadedLora:
    widths = {w for tensors, _, _ in layers.values() for w in _widths(tensors)}
    if len(widths) > 1:  # one rank for peft's layers: every layer padded to the largest, its delta exact
        layers = {key: (*_pad_rank(t, a, max(widths)), kohya) for key, (t, a, kohya) in layers.items()}
    ranks = Counter(r for tensors, _, _ in layers.values() if (r := layer_rank(tensors)) is not None)
    # a LoKr file of full matrices only has no rank in its tensors: the one it was trained with
    rank = next(iter(ranks)) if ranks else int(default_rank or 1)
    scaled = [(t, a) for t, a, kohya in layers.values() if not (kohya and is_unit_scale(t))]
    alphas = Counter(float(rank) if a is None else a for _, a in scaled)
    # a file of whole-matrix LoKr layers only: the writer's alpha (ss_network_alpha), so w1 reads back as trained
    alpha = alphas.most_common(1)[0][0] if alphas else float(default_alpha if default_alpha and default_alpha > 0 else rank)

    parts: dict[str, dict[str, torch.Tensor]] = {}
    for (part, path), (tensors, layer_alpha, kohya) in layers.items():
        check_layer(f"{part}.{path}", tensors)
        layer_alpha = float(rank) if layer_alpha is None else layer_alpha
        if kohya and is_unit_scale(tensors):  # applied at scale 1 by LyCORIS and ComfyUI
            tensors = scale_layer(tensors, rank / alpha)
        elif layer_alpha != alpha:
            tensors = scale_layer(tensors, layer_alpha / alpha)
        parts.setdefault(part, {}).update({f"{path}.{k}": v for k, v in tensors.items()})
    describe(parts)  # one kind of layer per file
    return LoadedLora(parts, rank, alpha)
