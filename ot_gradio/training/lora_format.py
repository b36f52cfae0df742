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
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from ot_gradio.config.resolution import parse_resolutions
from ot_gradio.models.comfy_lora_names import is_full_name
from ot_gradio.models.common import save_safetensors
from ot_gradio.models.key_layout import LayerName, fused_groups, layer_rows
from ot_gradio.training.lora import lora_rank_alpha, lora_state_dict, text_model_prefix
from ot_gradio.training.lora_fusion import fuse_layers, split_layer, swap_halves
from ot_gradio.training.lora_variants import (
    DORA_IN,
    DORA_OUT,
    LOKR,
    OFT_2,
    check_layer,
    describe,
    from_kohya,
    group_layers,
    is_unit_scale,
    kohya_network_metadata,
    layer_rank,
    layer_type,
    scale_layer,
    split_key,
    to_kohya,
)
from ot_gradio.training.oft import spec_fields
from ot_gradio.training.output_metadata import kohya_hashes

from .. import jsontext

KOHYA = "kohya"
DIFFUSERS = "diffusers"
LORA_FORMATS = (KOHYA, DIFFUSERS)
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# SD 1.x: the text encoder is `lora_te_`, which every SD 1 loader reads; A1111/Forge map
# `lora_te1_` (what diffusers' convert_state_dict_to_kohya writes) to SDXL's first encoder only.
# PixArt: the transformer is `lora_transformer_` and T5 `lora_te_`, as OneTrainer names them.
_KOHYA_PREFIX = {"unet": "lora_unet_", "transformer": "lora_transformer_", "text_encoder": "lora_te_", "text_encoder_2": "lora_te2_",
                 "prior": "lora_prior_unet_", "text_encoder_3": "lora_te3_"}
_KOHYA_READ_PREFIX = {
    "lora_unet_": "unet", "lora_transformer_": "transformer", "lora_te1_": "text_encoder", "lora_te2_": "text_encoder_2",
    "lora_te_": "text_encoder", "lora_prior_unet_": "prior", "lora_prior_te_": "text_encoder", "lora_te3_": "text_encoder_3",
}
# Würstchen 2 / Stable Cascade: `lora_prior_unet_` and `lora_prior_te_`, as OneTrainer writes and ComfyUI reads them.
_PRIOR_VERSIONS = ("wuerstchen", "stable_cascade")
# Qwen-Image's and HiDream's transformers are written `lora_unet_` (ComfyUI's generic rule reads that for
# both, their ComfyUI models having diffusers' layer names; diffusers' Qwen converter too)
_TRANSFORMER_AS_UNET_VERSIONS = ("qwen_image", "hidream")
_TEXT_PARTS = ("text_encoder", "text_encoder_2", "text_encoder_3")
# text-encoder paths not put under `text_model.` (T5's `encoder.block.N...` never had that wrapper)
_OUTSIDE_TEXT_MODEL = ("text_model.", "text_projection", "encoder.block.")
_DIFFUSERS_METADATA_KEY = "lora_adapter_metadata"
# diffusers/PEFT files hold alpha / rank folded into the weights (lora_B, hada_w1_a, lokr_w1[_a]) and
# say alpha = rank: ComfyUI reads no alpha from such a file (it looks for `<layer>.alpha` tensors,
# which diffusers does not expect) and applies scale 1, diffusers and peft read `lora_alpha` from
# the adapter metadata; both then apply what was trained. This key keeps the trained alpha, so our
# reader can undo the fold and a continued run trains at the same alpha.
FOLDED_ALPHA_KEY = "ot_gradio_folded_alpha"
COMFY_PREFIX = "diffusion_model."  # ComfyUI's name of the denoiser's original keys
_DORA_FILE_NAMES = {"lora_magnitude_vector": "lora_magnitude_vector.weight"}

# Multi-word names in SD UNet / CLIP / PixArt / T5 module paths, to turn kohya's `_`-joined names back into
# dotted paths without the model at hand.
_COMPOUND_WORDS = sorted(
    (
        tuple(w.split("_"))
        for w in (
            "down_blocks up_blocks mid_block transformer_blocks proj_in proj_out to_q to_k to_v to_out conv_in "
            "conv_out conv_shortcut conv_norm_out time_embedding time_emb_proj linear_1 linear_2 add_embedding "
            "class_embedding text_model self_attn q_proj k_proj v_proj out_proj text_projection final_layer_norm "
            "layer_norm1 layer_norm2 pos_embed caption_projection adaln_single timestep_embedder resolution_embedder "
            "aspect_ratio_embedder wi_0 wi_1 kv_mapper mapper_crp mapper_sca cond_mapper clip_txt_mapper "
            "clip_txt_pooled_mapper clip_img_mapper down_downscalers up_upscalers "
            # language-model text encoders (Qwen-Image's Qwen2.5-VL, Z-Image's Qwen3, Sana's Gemma 2)
            "language_model embed_tokens o_proj gate_proj up_proj down_proj "
            # Flux.1 / Chroma transformers (models/flux_keys.py)
            "single_transformer_blocks x_embedder context_embedder time_text_embed text_embedder guidance_embedder "
            "to_add_out add_q_proj add_k_proj add_v_proj norm1_context ff_context proj_mlp norm_out "
            # Chroma's approximator (distilled_guidance_layer.in_proj / out_proj)
            "distilled_guidance_layer in_proj"
        ).split()
    ),
    key=len,
    reverse=True,
)


class LoadedLora(NamedTuple):
    parts: dict[str, dict[str, torch.Tensor]]
    rank: int
    alpha: float


# -- names ----------------------------------------------------------------------------------


def kohya_prefixes(base_model_version: str = "sd_v1") -> dict[str, str]:
    """Part -> kohya prefix: SDXL's and Flux.1's CLIP-L is `lora_te1_` (sd-scripts, A1111, ComfyUI
    and diffusers read it so; diffusers' Flux loader reads no `lora_te_`), SD 1.x/2.x's one encoder `lora_te_`."""
    if str(base_model_version).startswith(("sdxl", "sd3", "flux1")):  # SD 3: lora_te1_/2_/3_ (models/sd3_keys.py)
        return {**_KOHYA_PREFIX, "text_encoder": "lora_te1_"}
    if str(base_model_version).startswith(_PRIOR_VERSIONS):
        return {**_KOHYA_PREFIX, "text_encoder": "lora_prior_te_"}
    if str(base_model_version).startswith(_TRANSFORMER_AS_UNET_VERSIONS):
        return {**_KOHYA_PREFIX, "transformer": "lora_unet_"}
    return dict(_KOHYA_PREFIX)


def kohya_name(
    part: str, module_path: str, base_model_version: str = "sd_v1", module_names: Mapping[str, str] | None = None
) -> str:
    """`lora_unet_down_blocks_0_...` / `lora_te_text_model_encoder_layers_0_self_attn_q_proj`;
    `module_names` renames the part's module paths first (SDXL's original UNet names); a rename
    that is a whole layer name (models/comfy_lora_names.py) is the name."""
    module_path = (module_names or {}).get(module_path, module_path)
    if is_full_name(module_path):
        return module_path
    if part in _TEXT_PARTS and not module_path.startswith(_OUTSIDE_TEXT_MODEL):
        module_path = "text_model." + module_path
    return kohya_prefixes(base_model_version)[part] + module_path.replace(".", "_")


def module_path_from_kohya(flat: str) -> str:
    """`down_blocks_0_attentions_0_proj_in` -> `down_blocks.0.attentions.0.proj_in`."""
    tokens = flat.split("_")
    out: list[str] = []
    i = 0
    while i < len(tokens):
        for word in _COMPOUND_WORDS:
            if tuple(tokens[i : i + len(word)]) == word:
                out.append("_".join(word))
                i += len(word)
                break
        else:
            out.append(tokens[i])
            i += 1
    return ".".join(out)


def _strip_text_model(part: str, path: str) -> str:
    return path.removeprefix("text_model.") if part in _TEXT_PARTS else path


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


def _split_layers(part: str, sd: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """{module path: {state name: tensor}} of one part, each layer checked to be one whole adapter."""
    layers = group_layers(sd, f"peft LoRA key in {part}")
    for path, tensors in layers.items():
        check_layer(f"{part}.{path}", tensors)
    return layers


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


# -- loading --------------------------------------------------------------------------------


def read_lora_metadata(path: str | os.PathLike) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def load_lora_file(
    path: str | os.PathLike, module_names: Mapping[str, Mapping[str, str]] | None = None, denoiser: str = "unet"
) -> LoadedLora:
    """Read a kohya or diffusers/PEFT LoRA into peft-form parts, one rank and one alpha.

    Layers whose alpha differs from the most common one get that difference folded into their
    up weights, so `alpha / rank` scaling with the returned alpha reproduces the file exactly.
    `module_names` are the renames the file was written with (`save_lora_parts`); kohya layer
    names made with them map back to the model's module paths. `lora_unet_` layers belong to
    the model's `denoiser` part (Qwen-Image's transformer is written so).
    """
    from safetensors.torch import load_file

    # embeddings bundled in the file (`bundle_emb.*`) are not LoRA layers
    tensors = {k: v for k, v in load_file(str(path)).items() if not k.startswith("bundle_emb.")}
    metadata = read_lora_metadata(path)
    if not tensors:
        raise ValueError(f"{path} holds no tensors.")
    full = _full_names(module_names or {})
    # a family whose kohya names are whole module paths (PixArt's `transformer.…`) shares them with
    # its diffusers layout: peft's lora_A / lora_B entries tell the diffusers layout apart
    peft_entries = any(k.endswith((".lora_A.weight", ".lora_B.weight", ".lora_magnitude_vector")) for k in tensors)
    if peft_entries and all(k.startswith(COMFY_PREFIX) and _full_layer(k, full) for k in tensors):
        # OneTrainer's COMFY_LORA: ComfyUI's `diffusion_model.` names with peft's lora_A / lora_B entries
        tensors = {k.replace(".lora_A.weight", ".lora_down.weight").replace(".lora_B.weight", ".lora_up.weight"): v
                   for k, v in tensors.items()}
        peft_entries = False
    if not peft_entries and all(k.startswith("lora_") or _full_layer(k, full) for k in tensors):
        layers = _layers_from_kohya(tensors, module_names or {}, denoiser)
    elif all(k.split(".", 1)[0] in _KOHYA_PREFIX for k in tensors):
        layers = _layers_from_diffusers(tensors, metadata)
    else:
        sample = [k for k in tensors if not k.startswith(("lora_", "unet.", "text_encoder"))][:3]
        raise ValueError(f"{path} is neither a kohya nor a diffusers LoRA (keys like {sample}).")
    default_rank = int(metadata["ss_network_dim"]) if metadata.get("ss_network_dim", "").isdigit() else None
    try:
        default_alpha = float(metadata["ss_network_alpha"]) if "ss_network_alpha" in metadata else None
    except ValueError:
        default_alpha = None
    return _fold_alphas(layers, default_rank, default_alpha)


# (part, module path) -> (peft-form tensors, alpha or None, read from a kohya file)
_Layers = dict[tuple[str, str], tuple[dict[str, torch.Tensor], float | None, bool]]


def _layers_from_kohya(
    tensors: Mapping[str, torch.Tensor], module_names: Mapping[str, Mapping[str, str]], denoiser: str = "unet"
) -> _Layers:
    renamed = {  # a layer now written under a whole name still reads back from its old `_`-joined path
        (part, (path if is_full_name(new) else new).replace(".", "_")): path
        for part, names in module_names.items() for path, new in names.items()
    }
    full = _full_names(module_names)
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
        prefix = next((p for p in _KOHYA_READ_PREFIX if name.startswith(p)), None)
        if prefix is None:
            raise ValueError(f"Unknown kohya LoRA prefix in {name!r}.")
        part = _KOHYA_READ_PREFIX[prefix]
        part = denoiser if part == "unet" else part
        flat = name.removeprefix(prefix)
        path = renamed.get((part, flat)) or _strip_text_model(part, module_path_from_kohya(flat))
        layers[(part, path)] = (peft_form, alpha, True)
    return layers


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
    file_alpha = float(metadata["ss_network_alpha"]) if "ss_network_alpha" in metadata else None
    trained_alpha = float(metadata[FOLDED_ALPHA_KEY]) if FOLDED_ALPHA_KEY in metadata else None

    layers: _Layers = {}
    for part, sd in by_part.items():
        sd = {k.removesuffix(".weight") if k.endswith(".lora_magnitude_vector.weight") else k: v for k, v in sd.items()}
        if not all(split_key(k) for k in sd):  # the 2023 attention-processor layout
            from diffusers.utils.state_dict_utils import StateDictType, convert_state_dict_to_peft, convert_unet_state_dict_to_peft

            if part in _TEXT_PARTS:
                sd = convert_state_dict_to_peft(dict(sd), original_type=StateDictType.DIFFUSERS_OLD)
            else:
                sd = convert_unet_state_dict_to_peft(dict(sd))
        alpha = adapter_meta.get(f"{part}.lora_alpha", adapter_meta.get(f"{part}.alpha", file_alpha))
        for path, tensors in _split_layers(part, sd).items():
            layer_alpha = None if alpha is None else float(alpha)
            if trained_alpha is not None:  # undo the writer's fold: the same delta at the trained alpha
                read_alpha = layer_alpha if layer_alpha is not None else float(adapter_meta.get(f"{part}.r") or layer_rank(tensors) or 1)
                file_scale = read_alpha / trained_alpha
                tensors, layer_alpha = scale_layer(tensors, file_scale), trained_alpha
            layers[(part, _strip_text_model(part, path))] = (tensors, layer_alpha, False)
    return layers


def _fold_alphas(layers: _Layers, default_rank: int | None = None, default_alpha: float | None = None) -> LoadedLora:
    ranks = Counter(r for tensors, _, _ in layers.values() if (r := layer_rank(tensors)) is not None)
    if len(ranks) > 1:
        raise ValueError(f"LoRA layers have different ranks {sorted(ranks)}; only one rank is supported.")
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
