"""An embedding's file keys, and reading embedding files (embeddings.py writes them).

Keys per text encoder are the family's `embedding_keys` (OneTrainer's): `emp_params` for SD
1.x/2.x (a single-tensor file, which A1111, ComfyUI and diffusers' `load_textual_inversion` take
whatever its key), `clip_l` + `clip_g` for SDXL, `clip_l` + `t5` for Flux.1, .... A file with
`t5` beside other keys (Flux.1, SD 3, HiDream) also holds a copy of those vectors as `t5xxl`,
the key ComfyUI's T5 tokenizers look up (without it ComfyUI takes the file's first tensor, a CLIP
one, and drops the embedding from T5); OneTrainer and this trainer read `t5` and pass over it.

Reading also takes `emb_params` (what this trainer wrote before), A1111 `.pt` files
(`string_to_param`), diffusers' single-token files and a lone `t5xxl`. Output vectors are under
`<key>_out` (`emp_params_out`; `bundle_emb.<name>.clip_l_out` in a LoRA), as OneTrainer writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

SINGLE_KEY = "emp_params"  # OneTrainer's (its StableDiffusionEmbeddingSaver), sic
_LEGACY_SINGLE_KEY = "emb_params"  # this trainer's before
# keys other tools write for a single text encoder's vectors
_SINGLE_ALIASES = (SINGLE_KEY, _LEGACY_SINGLE_KEY, "clip_l")
# key -> the copy written for ComfyUI beside other keys (its tokenizers' embedding_key), also read
COMFY_COPIES = {"t5": "t5xxl"}
BUNDLE_PREFIX = "bundle_emb."
OUT_SUFFIX = "_out"


def _single(key: str) -> bool:
    return key in (SINGLE_KEY, _LEGACY_SINGLE_KEY)


def output_key(key: str) -> str:
    """The key of a part's output vectors in an embedding file (OneTrainer's, with its
    `emp_params_out` for SD 1.x/2.x)."""
    return (SINGLE_KEY if _single(key) else key) + OUT_SUFFIX


def bundle_key(name: str, key: str) -> str:
    """The key of an embedding's vectors inside a LoRA file."""
    return f"{BUNDLE_PREFIX}{name}." + ("string_to_param.*" if _single(key) else key)


def bundle_output_key(name: str, key: str) -> str:
    """The key of an embedding's output vectors inside a LoRA file (OneTrainer's)."""
    return f"{BUNDLE_PREFIX}{name}." + ("clip_l" if _single(key) else key) + OUT_SUFFIX


def with_comfy_copies(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A separate file's tensors plus ComfyUI's copies (`t5xxl` of `t5`) where the file has other
    keys too; a lone tensor ComfyUI takes as it is."""
    if len(tensors) < 2:
        return tensors
    return tensors | {copy: tensors[key].clone() for key, copy in COMFY_COPIES.items() if key in tensors and copy not in tensors}


def read_embedding_file(path: str | Path, keys: Mapping[str, str], widths: Mapping[str, int], field: str) -> dict[str, torch.Tensor]:
    """The (input) vectors of an embedding file per text encoder part ([tokens, width] each)."""
    return input_vectors(load_embedding_tensors(path, field), keys, widths, path, field)


def load_embedding_tensors(path: str | Path, field: str) -> dict[str, torch.Tensor]:
    """Every tensor of an embedding file by its key (an A1111 `.pt`: its one vector as `string_to_param`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"{field}.model_name: {path} does not exist; give an embedding .safetensors (or .pt) file, or leave it blank")
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors.torch import load_file

            data: dict[str, Any] = dict(load_file(str(path)))
        else:
            data = dict(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as e:  # a broken or foreign file
        raise ValueError(f"{field}.model_name: {path} could not be read as an embedding ({e})") from e
    params = data.get("string_to_param")
    if isinstance(params, Mapping) and params:  # A1111 .pt
        data = {"string_to_param": next(iter(params.values()))}
    return {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}


def output_vectors(tensors: Mapping[str, torch.Tensor], keys: Mapping[str, str], widths: Mapping[str, int],
                   path: str | Path, field: str) -> dict[str, torch.Tensor]:
    """An output embedding file's output vectors (float32) per part; {} for a file of input
    vectors. `widths`: those of the family's output_embedding_parts; a part outside them may have
    some too (OneTrainer writes HiDream's Llama ones, which it does not apply either)."""
    out = {}
    for part, key in keys.items():
        found = tensors.get(output_key(key), tensors.get(key + OUT_SUFFIX))
        if found is None:
            continue
        found = found.detach().float()
        if found.ndim != 2 or found.shape[1] != widths.get(part, found.shape[-1]):
            raise ValueError(
                f"{field}.model_name: {path} has output vectors of shape {tuple(found.shape)}, but the "
                f"{part.replace('_', ' ')}'s output needs width {widths[part]}: it was made for another model type"
            )
        out[part] = found
    return out


def input_vectors(tensors: Mapping[str, torch.Tensor], keys: Mapping[str, str], widths: Mapping[str, int],
                  path: str | Path, field: str) -> dict[str, torch.Tensor]:
    """An embedding file's input vectors for the parts in `keys`."""
    tensors = {k: v for k, v in tensors.items() if not k.endswith(OUT_SUFFIX)}
    out: dict[str, torch.Tensor] = {}
    for part, key in keys.items():
        found = next((tensors[k] for k in (key, COMFY_COPIES.get(key)) if k in tensors), None)
        if found is None and len(keys) == 1:
            found = next((tensors[k] for k in (*_SINGLE_ALIASES, "string_to_param") if k in tensors), None)
            if found is None and len(tensors) == 1:  # diffusers: {"<token>": vector}
                found = next(iter(tensors.values()))
        if found is None:
            raise ValueError(
                f"{field}.model_name: {path} has no vectors for the {part.replace('_', ' ')} (key '{key}'; the file has "
                f"{', '.join(sorted(tensors)) or 'no tensors'}): it was made for another model type"
            )
        found = found.detach().float()
        if found.ndim == 1:
            found = found.unsqueeze(0)
        if found.ndim != 2 or found.shape[1] != widths[part]:
            raise ValueError(
                f"{field}.model_name: {path} has vectors of shape {tuple(found.shape)}, but the {part.replace('_', ' ')} "
                f"needs width {widths[part]}: it was made for another model type"
            )
        out[part] = found
    if len({int(v.shape[0]) for v in out.values()}) > 1:
        raise ValueError(f"{field}.model_name: {path} has a different token count per text encoder")
    return out
