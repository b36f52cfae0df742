"""LoRA files: kohya/A1111 keys (what A1111, Forge, ComfyUI and diffusers load) and the
diffusers/PEFT layout, both ways.

In memory a LoRA is "parts": {"unet": {...}, "text_encoder": {...}} of peft-form weights
(`<module path>.lora_A.weight` / `.lora_B.weight`) plus one rank and one alpha. Text-encoder
paths are kept without CLIP's `text_model.` wrapper (transformers >= 5.6 layout) and written
with it, the way single-file tools and older diffusers expect.
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

from ot_gradio.fsutil import atomic_write
from ot_gradio.training.lora import lora_rank_alpha, lora_state_dict, text_model_prefix

KOHYA = "kohya"
DIFFUSERS = "diffusers"
LORA_FORMATS = (KOHYA, DIFFUSERS)
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# SD 1.x: the text encoder is `lora_te_`, which every SD 1 loader reads; A1111/Forge map
# `lora_te1_` (what diffusers' convert_state_dict_to_kohya writes) to SDXL's first encoder only.
_KOHYA_PREFIX = {"unet": "lora_unet_", "text_encoder": "lora_te_", "text_encoder_2": "lora_te2_"}
_KOHYA_READ_PREFIX = {"lora_unet_": "unet", "lora_te1_": "text_encoder", "lora_te2_": "text_encoder_2", "lora_te_": "text_encoder"}
_TEXT_PARTS = ("text_encoder", "text_encoder_2")
_DIFFUSERS_METADATA_KEY = "lora_adapter_metadata"

# Multi-word names in SD UNet / CLIP module paths, to turn kohya's `_`-joined names back into
# dotted paths without the model at hand.
_COMPOUND_WORDS = sorted(
    (
        tuple(w.split("_"))
        for w in (
            "down_blocks up_blocks mid_block transformer_blocks proj_in proj_out to_q to_k to_v to_out conv_in "
            "conv_out conv_shortcut conv_norm_out time_embedding time_emb_proj linear_1 linear_2 add_embedding "
            "class_embedding text_model self_attn q_proj k_proj v_proj out_proj text_projection final_layer_norm "
            "layer_norm1 layer_norm2"
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


def kohya_name(part: str, module_path: str) -> str:
    """`lora_unet_down_blocks_0_...` / `lora_te_text_model_encoder_layers_0_self_attn_q_proj`."""
    if part in _TEXT_PARTS and not module_path.startswith("text_model."):
        module_path = "text_model." + module_path
    return _KOHYA_PREFIX[part] + module_path.replace(".", "_")


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
) -> Path:
    """Write peft-form parts (as `load_lora_file` returns them) in either format, atomically.

    This is also the format converter: `save_lora_parts(out, *load_lora_file(src), lora_format=...)`.
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
        tensors = _to_kohya(parts, alpha, dtype)
    else:
        tensors = _to_diffusers(parts, dtype)
    has_conv = any(t.ndim == 4 and t.shape[-1] > 1 for sd in parts.values() for t in sd.values())
    metadata = _training_metadata(
        rank=rank,
        alpha=alpha,
        base_model_version=base_model_version,
        resolution=resolution,
        steps=steps,
        epoch=epoch,
        output_name=output_name,
        kohya=lora_format == KOHYA,
        has_conv=has_conv,
    )
    if lora_format == DIFFUSERS:
        metadata["format"] = "pt"
        metadata[_DIFFUSERS_METADATA_KEY] = json.dumps(_peft_adapter_metadata(parts, rank, alpha), sort_keys=True)
    for key, value in (extra_metadata or {}).items():
        metadata[str(key)] = value if isinstance(value, str) else json.dumps(value)
    _atomic_save_file(tensors, path, metadata)
    return path


def _split_pairs(part: str, sd: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in sd.items():
        for which in ("A", "B"):
            suffix = f".lora_{which}.weight"
            if key.endswith(suffix):
                pairs.setdefault(key.removesuffix(suffix), {})[which] = tensor
                break
        else:
            raise ValueError(f"Not a peft LoRA key in {part}: {key!r}.")
    broken = [k for k, v in pairs.items() if set(v) != {"A", "B"}]
    if broken:
        raise ValueError(f"LoRA layers without both A and B weights in {part}: {broken[:3]}.")
    return {k: (v["A"], v["B"]) for k, v in pairs.items()}


def _out(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.detach().to(device="cpu", dtype=dtype).contiguous().clone()


def _to_kohya(parts: Mapping[str, Mapping[str, torch.Tensor]], alpha: float, dtype: torch.dtype) -> dict:
    tensors: dict[str, torch.Tensor] = {}
    for part, sd in parts.items():
        for module_path, (down, up) in _split_pairs(part, sd).items():
            name = kohya_name(part, module_path)
            tensors[f"{name}.lora_down.weight"] = _out(down, dtype)
            tensors[f"{name}.lora_up.weight"] = _out(up, dtype)
            # float32 so an alpha like 0.3 survives a bf16 file exactly; readers call .item().
            tensors[f"{name}.alpha"] = torch.tensor(float(alpha), dtype=torch.float32)
    return tensors


def _to_diffusers(parts: Mapping[str, Mapping[str, torch.Tensor]], dtype: torch.dtype) -> dict:
    tensors: dict[str, torch.Tensor] = {}
    for part, sd in parts.items():
        for module_path, (down, up) in _split_pairs(part, sd).items():
            if part in _TEXT_PARTS and not module_path.startswith("text_model."):
                module_path = "text_model." + module_path  # diffusers strips it again for flattened CLIP
            tensors[f"{part}.{module_path}.lora_A.weight"] = _out(down, dtype)
            tensors[f"{part}.{module_path}.lora_B.weight"] = _out(up, dtype)
    return tensors


def _peft_adapter_metadata(parts: Mapping[str, Mapping[str, torch.Tensor]], rank: int, alpha: float) -> dict:
    """The LoraConfig diffusers rebuilds on load (`<part>.r`, `<part>.lora_alpha`, ...); without
    it diffusers assumes alpha = rank."""
    out: dict[str, Any] = {}
    for part, sd in parts.items():
        # Targets without `text_model.` match both flattened and wrapped CLIP by suffix.
        targets = sorted(_strip_text_model(part, k) for k in _split_pairs(part, sd))
        config = {
            "r": rank,
            "lora_alpha": alpha,
            "target_modules": targets,
            "rank_pattern": {},
            "alpha_pattern": {},
            "lora_dropout": 0.0,
            "use_dora": False,
            "lora_bias": False,
        }
        out.update({f"{part}.{k}": v for k, v in config.items()})
    return out


def _format_resolution(resolution: int | tuple[int, int] | str) -> str:
    if isinstance(resolution, int):
        return f"({resolution}, {resolution})"
    if isinstance(resolution, tuple):
        return f"({resolution[0]}, {resolution[1]})"
    return str(resolution)


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


def _atomic_save_file(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """Temp file in the same folder, fsync, rename: a crash never leaves a half-written LoRA."""
    from safetensors.torch import save_file

    atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


# -- loading --------------------------------------------------------------------------------


def read_lora_metadata(path: str | os.PathLike) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def load_lora_file(path: str | os.PathLike) -> LoadedLora:
    """Read a kohya or diffusers/PEFT LoRA into peft-form parts, one rank and one alpha.

    Layers whose alpha differs from the most common one get that difference folded into their
    up weights, so `alpha / rank` scaling with the returned alpha reproduces the file exactly.
    """
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    metadata = read_lora_metadata(path)
    if not tensors:
        raise ValueError(f"{path} holds no tensors.")
    if all(k.startswith("lora_") for k in tensors):
        layers = _layers_from_kohya(tensors)
    elif all(k.split(".", 1)[0] in _KOHYA_PREFIX for k in tensors):
        layers = _layers_from_diffusers(tensors, metadata)
    else:
        sample = [k for k in tensors if not k.startswith(("lora_", "unet.", "text_encoder"))][:3]
        raise ValueError(f"{path} is neither a kohya nor a diffusers LoRA (keys like {sample}).")
    return _fold_alphas(layers)


# (part, module path) -> (down, up, alpha or None)
_Layers = dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor, float | None]]


def _layers_from_kohya(tensors: Mapping[str, torch.Tensor]) -> _Layers:
    names: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        name, _, suffix = key.partition(".")
        names.setdefault(name, {})[suffix] = tensor
    layers: _Layers = {}
    for name, entries in names.items():
        extra = set(entries) - {"lora_down.weight", "lora_up.weight", "alpha"}
        if extra or "lora_down.weight" not in entries or "lora_up.weight" not in entries:
            raise ValueError(
                f"Unsupported LoRA layer {name!r} (entries {sorted(entries)}); only plain LoRA "
                "(lora_down/lora_up/alpha) is supported, not LoCon variants, LoHa, LoKr or DoRA."
            )
        prefix = next((p for p in _KOHYA_READ_PREFIX if name.startswith(p)), None)
        if prefix is None:
            raise ValueError(f"Unknown kohya LoRA prefix in {name!r}.")
        part = _KOHYA_READ_PREFIX[prefix]
        path = _strip_text_model(part, module_path_from_kohya(name.removeprefix(prefix)))
        alpha = float(entries["alpha"].item()) if "alpha" in entries else None
        layers[(part, path)] = (entries["lora_down.weight"], entries["lora_up.weight"], alpha)
    return layers


def _layers_from_diffusers(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> _Layers:
    by_part: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        part, _, rest = key.partition(".")
        by_part.setdefault(part, {})[rest] = tensor
    adapter_meta = json.loads(metadata[_DIFFUSERS_METADATA_KEY]) if _DIFFUSERS_METADATA_KEY in metadata else {}
    file_alpha = float(metadata["ss_network_alpha"]) if "ss_network_alpha" in metadata else None

    layers: _Layers = {}
    for part, sd in by_part.items():
        if not all(".lora_A." in k or ".lora_B." in k for k in sd):  # the 2023 attention-processor layout
            from diffusers.utils.state_dict_utils import StateDictType, convert_state_dict_to_peft, convert_unet_state_dict_to_peft

            if part in _TEXT_PARTS:
                sd = convert_state_dict_to_peft(dict(sd), original_type=StateDictType.DIFFUSERS_OLD)
            else:
                sd = convert_unet_state_dict_to_peft(dict(sd))
        alpha = adapter_meta.get(f"{part}.lora_alpha", file_alpha)
        for path, (down, up) in _split_pairs(part, sd).items():
            layers[(part, _strip_text_model(part, path))] = (down, up, None if alpha is None else float(alpha))
    return layers


def _fold_alphas(layers: _Layers) -> LoadedLora:
    ranks = Counter(int(down.shape[0]) for down, _, _ in layers.values())
    if len(ranks) > 1:
        raise ValueError(f"LoRA layers have different ranks {sorted(ranks)}; only one rank is supported.")
    rank = next(iter(ranks))
    alphas = Counter(float(rank) if a is None else a for _, _, a in layers.values())
    alpha = alphas.most_common(1)[0][0]

    parts: dict[str, dict[str, torch.Tensor]] = {}
    for (part, path), (down, up, layer_alpha) in layers.items():
        layer_alpha = float(rank) if layer_alpha is None else layer_alpha
        if layer_alpha != alpha:
            up = (up.float() * (layer_alpha / alpha)).to(up.dtype)
        sd = parts.setdefault(part, {})
        sd[f"{path}.lora_A.weight"] = down
        sd[f"{path}.lora_B.weight"] = up
    return LoadedLora(parts, rank, alpha)
