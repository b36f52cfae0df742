"""LoRA files: kohya/A1111 keys (what A1111, Forge, ComfyUI and diffusers load) and the
diffusers/PEFT layout, both ways.

In memory a LoRA is "parts": {"unet": {...}, "text_encoder": {...}} of peft-form weights
(`<module path>.lora_A.weight` / `.lora_B.weight`; DoRA, LoHa and LoKr layers carry the state
names of `lora_variants.py`) plus one rank and one alpha. Kohya files hold LyCORIS's entries
(`dora_scale`, `hada_*`, `lokr_*`); diffusers/PEFT files peft's own state names. Text-encoder
paths are kept without CLIP's `text_model.` wrapper (transformers >= 5.6 layout) and written
with it, the way single-file tools and older diffusers expect (a projected encoder's
`text_projection` sits outside the wrapper and stays so).

kohya names depend on the base model (`base_model_version`): SD 1.x/2.x write `lora_te_` and the
diffusers UNet names; SDXL writes `lora_te1_` / `lora_te2_` and, given the model's renames
(`module_names`, from the family's `lora_module_names()`), the original UNet names
(`lora_unet_input_blocks_4_1_...`) that sd-scripts, A1111 and ComfyUI use. Reading takes the
same renames to map such names back. A rename may be a whole layer name: the families ComfyUI
names otherwise (Z-Image, PixArt, Flux.2, Chroma, Qwen-Image's text encoder) give the names its key
map reads (models/comfy_lora_names.py), and reading maps them back the same way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ot_gradio.config.resolution import parse_resolutions
from ot_gradio.models.common import save_safetensors
from ot_gradio.models.key_layout import fused_groups, layer_rows
from ot_gradio.training.lora import lora_rank_alpha, lora_state_dict, text_model_prefix
from ot_gradio.training.lora_fusion import fuse_layers, swap_halves
from ot_gradio.training.lora_layer_entries import describe, kohya_network_metadata, layer_type, scale_layer, to_kohya
from ot_gradio.training.lora_names import (  # noqa: F401 (kohya_name, module_path_from_kohya: this module's API)
    _DIFFUSERS_METADATA_KEY,
    _KOHYA_PREFIX,
    _OUTSIDE_TEXT_MODEL,
    _TEXT_PARTS,
    COMFY_PREFIX,
    FOLDED_ALPHA_KEY,
    _split_layers,
    _strip_text_model,
    kohya_name,
    kohya_prefixes,
    module_path_from_kohya,
)
from ot_gradio.training.lora_reading import LoadedLora, load_lora_file, read_lora_metadata  # noqa: F401 (the reader, lora_reading.py)
from ot_gradio.training.lora_variants import DORA_IN, DORA_OUT, LOKR, OFT_2
from ot_gradio.training.oft import spec_fields
from ot_gradio.training.output_metadata import kohya_hashes

KOHYA = "kohya"
DIFFUSERS = "diffusers"
LORA_FORMATS = (KOHYA, DIFFUSERS)
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_DORA_FILE_NAMES = {"lora_magnitude_vector": "lora_magnitude_vector.weight"}


# -- saving ---------------------------------------------------------------------------------


def save_lora(
    path: str | os.PathLike,
    modules: Mapping[str, nn.Module] | None = None,
    *,
    unet: nn.Module | None = None,
    text_encoder: nn.Module | None = None,
    **options: Any,
) -> Path:
    """Export the LoRA layers of the given (add_lora-wrapped) modules to one `.safetensors`.

    `modules` maps part names (unet, text_encoder, text_encoder_2, ...) to modules; `unet=` and
    `text_encoder=` are shorthands. `options` are `save_lora_parts`'s keywords (format, dtype,
    metadata), passed on unchanged."""
    modules = dict(modules or {})
    modules.update({k: m for k, m in (("unet", unet), ("text_encoder", text_encoder)) if m is not None})
    parts: dict[str, dict[str, torch.Tensor]] = {}
    rank_alpha: set[tuple[int, float]] = set()
    for part, module in modules.items():
        if module is None:
            continue
        sd = lora_state_dict(module)
        if not sd:
            raise ValueError(f"The {part} has no LoRA layers.")
        prefix = text_model_prefix(module) if part in _TEXT_PARTS else ""
        parts[part] = {_strip_text_model(part, prefix + k): v for k, v in sd.items()}
        rank_alpha.add(lora_rank_alpha(module))
    if len(rank_alpha) > 1:
        raise ValueError(f"UNet and text encoder LoRA differ in rank/alpha: {sorted(rank_alpha)}.")
    if not parts:
        raise ValueError("Nothing to save: pass the unet and/or the text_encoder.")
    rank, alpha = rank_alpha.pop()
    return save_lora_parts(path, parts, rank=rank, alpha=alpha, **options)


def save_lora_parts(
    path: str | os.PathLike,
    parts: Mapping[str, Mapping[str, torch.Tensor]],
    rank: int,
    alpha: float,
    *,
    lora_format: str = KOHYA,
    dtype: torch.dtype = torch.float32,
    base_model_version: str = "sd_v1",
    resolution: int | tuple[int, int] | str | None = None,
    steps: int | None = None,
    epoch: int | None = None,
    output_name: str | None = None,
    extra_metadata: Mapping[str, Any] | None = None,
    module_names: Mapping[str, Mapping[str, str]] | None = None,
    extra_tensors: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Write peft-form parts (as `load_lora_file` returns them) in either format, atomically.

    This is also the format converter: `save_lora_parts(out, *load_lora_file(src), lora_format=...)`.
    `module_names` (part -> {module path: kohya module path}) renames layers in kohya files.
    `extra_tensors` are written as they are (embeddings bundled as `bundle_emb.*`).
    """
    if lora_format not in LORA_FORMATS:
        raise ValueError(f"Unknown LoRA format {lora_format!r}; expected one of {', '.join(LORA_FORMATS)}.")
    if dtype not in OUTPUT_DTYPES:
        raise ValueError(f"LoRA output dtype must be float32, float16 or bfloat16, got {dtype}.")
    unknown = [p for p in parts if p not in _KOHYA_PREFIX]
    if unknown:
        raise ValueError(f"Unknown LoRA part(s) {unknown}; expected {', '.join(_KOHYA_PREFIX)}.")
    path = Path(path)
    if output_name is None:
        output_name = path.stem

    if lora_format == KOHYA:
        tensors = _to_kohya(parts, rank, alpha, dtype, base_model_version, module_names or {})
    else:
        tensors = _to_diffusers(parts, dtype, alpha / rank)
    tensors.update({k: _out(v, v.dtype) for k, v in (extra_tensors or {}).items()})
    has_conv = any(t.ndim == 4 and t.shape[-1] > 1 for sd in parts.values() for t in sd.values())
    metadata = _training_metadata(
        rank=rank,
        alpha=alpha if lora_format == KOHYA else float(rank),  # what the file's tensors are read with
        base_model_version=base_model_version,
        resolution=resolution,
        steps=steps,
        epoch=epoch,
        output_name=output_name,
        kohya=lora_format == KOHYA,
        has_conv=has_conv,
    )
    if lora_format == KOHYA:
        metadata.update(kohya_network_metadata(*describe(parts)))
    if lora_format == DIFFUSERS:
        metadata["format"] = "pt"
        metadata[_DIFFUSERS_METADATA_KEY] = json.dumps(_peft_adapter_metadata(parts, rank, float(rank)), sort_keys=True)
        metadata[FOLDED_ALPHA_KEY] = str(float(alpha))
    for key, value in (extra_metadata or {}).items():
        metadata[str(key)] = value if isinstance(value, str) else json.dumps(value)
    metadata.update(kohya_hashes(tensors, metadata))
    save_safetensors(tensors, path, metadata)
    return path


def _out(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if not t.is_floating_point():  # Scaled OFT's marker stays a bool, as OneTrainer writes it
        dtype = t.dtype
    return t.detach().to(device="cpu", dtype=dtype).contiguous().clone()


def _to_kohya(
    parts: Mapping[str, Mapping[str, torch.Tensor]],
    rank: int,
    alpha: float,
    dtype: torch.dtype,
    base_model_version: str,
    module_names: Mapping[str, Mapping[str, str]],
) -> dict:
    tensors: dict[str, torch.Tensor] = {}
    for part, sd in parts.items():
        for name, (layer, count) in _kohya_layers(part, _split_layers(part, sd), base_model_version, module_names.get(part) or {}).items():
            tensors.update({f"{name}.{k}": _out(v, dtype) for k, v in to_kohya(layer, rank * count, alpha * count).items()})
            if layer_type(layer) == OFT_2:
                continue  # OFT has no alpha; OneTrainer writes none
            # float32 so an alpha like 0.3 survives a bf16 file exactly; readers call .item().
            tensors[f"{name}.alpha"] = torch.tensor(float(alpha * count), dtype=torch.float32)
    return tensors


def _kohya_layers(part: str, layers: Mapping[str, dict[str, torch.Tensor]], base_model_version: str,
                  names: Mapping[str, str]) -> dict[str, tuple[dict[str, torch.Tensor], int]]:
    """kohya layer name -> (peft-form layer, how many layers it fuses): the layers one name is
    given to (an original fused q/k/v) are one layer on the fused weight (training/lora_fusion.py),
    the ones not trained zero blocks in it."""
    groups: dict[str, list[str]] = {}
    for path in layers:
        groups.setdefault(kohya_name(part, path, base_model_version, names), []).append(path)
    fused = fused_groups(names)
    out = {}
    for name, paths in groups.items():
        members = fused.get(name, paths)
        layer, count = (layers[paths[0]], 1) if len(members) == 1 else (
            fuse_layers(name, [layers.get(p) for p in members], layer_rows(name)[0]), len(members))
        out[name] = (swap_halves(name, layer) if layer_rows(name)[1] else layer, count)
    return out


def _to_diffusers(parts: Mapping[str, Mapping[str, torch.Tensor]], dtype: torch.dtype, scale: float) -> dict:
    """peft-named tensors with `scale` (alpha / rank) folded into each layer (see FOLDED_ALPHA_KEY)."""
    tensors: dict[str, torch.Tensor] = {}
    for part, sd in parts.items():
        for module_path, layer in _split_layers(part, sd).items():
            layer = scale_layer({k: v.float() for k, v in layer.items()}, scale) if scale != 1.0 else layer
            if layer_type(layer) == LOKR and (DORA_IN in layer or DORA_OUT in layer):
                raise ValueError("LoKr with DoRA (lokr_weight_decompose) has no diffusers/PEFT form: peft's LoKr layers "
                                 "have no magnitude. Save it as KOHYA_LORA (LyCORIS keys with dora_scale).")
            if DORA_IN in layer:
                raise ValueError(
                    "DoRA decomposed on the input axis cannot be written with diffusers/PEFT keys: peft and diffusers "
                    "decompose on the output axis. Save it as KOHYA_LORA or train with lora_decompose_output_axis on."
                )
            if part in _TEXT_PARTS and not module_path.startswith(_OUTSIDE_TEXT_MODEL):
                module_path = "text_model." + module_path  # diffusers strips it again for flattened CLIP
            # peft's own state names: lora_A/lora_B(.weight), hada_*, lokr_*; DoRA's magnitude as
            # `lora_magnitude_vector.weight`, the spelling diffusers 0.42 loads into text encoders too
            tensors.update({f"{part}.{module_path}.{_DORA_FILE_NAMES.get(k, k)}": _out(v, dtype) for k, v in layer.items()})
    return tensors


def _peft_adapter_metadata(parts: Mapping[str, Mapping[str, torch.Tensor]], rank: int, alpha: float) -> dict:
    """The LoraConfig diffusers rebuilds on load (`<part>.r`, `<part>.lora_alpha`, ...); without
    it diffusers assumes alpha = rank. LoHa/LoKr parts get their LoHaConfig/LoKrConfig fields
    (`peft_type`, `alpha`, ...), which diffusers does not load but peft and our reader do."""
    out: dict[str, Any] = {}
    for part, sd in parts.items():
        layers = _split_layers(part, sd)
        # Targets without `text_model.` match both flattened and wrapped CLIP by suffix.
        targets = sorted(_strip_text_model(part, k) for k in layers)
        kind = layer_type(next(iter(layers.values()), {}))
        config: dict[str, Any] = {"r": rank, "target_modules": targets, "rank_pattern": {}, "alpha_pattern": {}}
        if kind == OFT_2:  # peft's OFTConfig fields (peft has no Scaled OFT: the file's markers say it)
            layout = spec_fields(layers.values())
            config.update(peft_type="OFT", r=0, oft_block_size=layout["oft_block_size"], block_share=layout["oft_block_share"])
        elif kind == "LORA":
            config.update(lora_alpha=alpha, lora_dropout=0.0, lora_bias=False,
                          use_dora=any("lora_magnitude_vector" in t for t in layers.values()))
        else:
            config.update(peft_type=kind, alpha=alpha)
            if kind == "LOKR":
                config.update(decompose_both=any("lokr_w1_a" in t for t in layers.values()),
                              use_effective_conv2d=any("lokr_t2" in t for t in layers.values()))
        out.update({f"{part}.{k}": v for k, v in config.items()})
    return out


def _format_resolution(resolution: int | tuple[int, int] | str) -> str:
    if isinstance(resolution, int):
        return f"({resolution}, {resolution})"
    if isinstance(resolution, tuple):
        return f"({resolution[0]}, {resolution[1]})"
    try:  # a config's text ("512", "768x512", "384,448,512"): the largest, as (W, H)
        h, w = max(parse_resolutions(resolution), key=lambda hw: hw[0] * hw[1])
    except ValueError:
        return str(resolution)
    return f"({w}, {h})"


def _training_metadata(
    *,
    rank: int,
    alpha: float,
    base_model_version: str,
    resolution,
    steps,
    epoch,
    output_name: str,
    kohya: bool,
    has_conv: bool,
) -> dict[str, str]:
    meta = {
        "ss_network_dim": str(int(rank)),
        "ss_network_alpha": str(float(alpha)),
        "ss_base_model_version": base_model_version,
        "ss_v2": str(base_model_version.startswith("sd_v2")),
        "ss_output_name": output_name,
    }
    if base_model_version.endswith("_v"):  # kohya's "sd_v2_v": a v-prediction base model
        meta["ss_v_parameterization"] = "True"
    if kohya:
        meta["ss_network_module"] = "networks.lora"
        if has_conv:
            meta["ss_network_args"] = json.dumps({"conv_dim": str(int(rank)), "conv_alpha": str(float(alpha))})
    if resolution is not None:
        meta["ss_resolution"] = _format_resolution(resolution)
    if steps is not None:
        meta["ss_steps"] = str(int(steps))
    if epoch is not None:
        meta["ss_epoch"] = str(int(epoch))
    return meta
