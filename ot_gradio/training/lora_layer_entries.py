"""One adapter layer's entries as files hold them, beside the layers `lora_variants.py` builds.

A LoRA file's state is grouped by layer (`group_layers`: {module path: {state name: tensor}}); each
layer is checked to be one complete adapter (`check_layer`), scaled, and converted to and from the
kohya / LyCORIS entries A1111, ComfyUI and Forge read (`to_kohya`, `from_kohya`). The config checks
at the end refuse an output format or a LoRA to continue from that does not hold the adapter the
config trains, naming the field to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import torch

from . import oft
from .lora_variants import (
    DORA_IN,
    DORA_OUT,
    LOHA,
    LOHA_KEYS,
    LOKR,
    LOKR_KEYS,
    LORA,
    LORA_KEYS,
    PARAM_NAMES,
    AdapterSpec,
    magnitude_shape,
)
from .oft import OFT_2, OFT_KEYS, OFT_SCALED, OFT_WEIGHT

# -- state names ----------------------------------------------------------------------------


def split_key(key: str) -> tuple[str, str] | None:
    """`<module path>.<state name>` -> (module path, state name); None for other keys."""
    for name in PARAM_NAMES:
        if key.endswith("." + name):
            return key[: -len(name) - 1], name
    return None


def layer_type(names: Iterable[str]) -> str:
    names = set(names)
    if names & set(OFT_KEYS):
        return OFT_2
    if names & set(LOHA_KEYS):
        return LOHA
    if names & set(LOKR_KEYS):
        return LOKR
    return LORA


def check_layer(path: str, tensors: Mapping[str, torch.Tensor]) -> str:
    """The layer's type; ValueError when its entries are not one complete adapter."""
    names = set(tensors)
    kind = layer_type(names)
    allowed = {LORA: {*LORA_KEYS, DORA_OUT, DORA_IN}, LOHA: set(LOHA_KEYS), LOKR: {*LOKR_KEYS, DORA_OUT, DORA_IN},
               OFT_2: set(OFT_KEYS)}[kind]
    if kind == OFT_2:
        ok = OFT_WEIGHT in names
    elif kind == LORA:
        ok = set(LORA_KEYS) <= names and not {DORA_OUT, DORA_IN} <= names
    elif kind == LOHA:
        ok = set(LOHA_KEYS[:4]) <= names and ({"hada_t1", "hada_t2"} <= names or not names & {"hada_t1", "hada_t2"})
    else:
        w1 = ("lokr_w1" in names) != ({"lokr_w1_a", "lokr_w1_b"} <= names)
        w2 = ("lokr_w2" in names) != ({"lokr_w2_a", "lokr_w2_b"} <= names)
        ok = w1 and w2 and ("lokr_t2" not in names or "lokr_w2_a" in names) and not {DORA_OUT, DORA_IN} <= names
    if not ok or names - allowed:
        raise ValueError(f"Incomplete or mixed adapter weights for layer {path!r}: {sorted(names)}.")
    return kind


def layer_rank(tensors: Mapping[str, torch.Tensor]) -> int | None:
    """The rank of one layer; None for a LoKr layer of two full matrices (no rank in it)."""
    for name in ("lora_A.weight", "hada_w1_b", "lokr_w1_b", "lokr_w2_b"):
        if name in tensors:
            return int(tensors[name].shape[0])
    return None


def part_spec(spec: AdapterSpec, part: str) -> AdapterSpec:
    """The spec for one model part: `check_start_file` names each whole-w2 layer `part:key`, since two
    parts can have the same layer paths (SDXL's text encoders); `add_lora` matches one part's keys."""
    if not any(":" in key for key in spec.lokr_whole_w2):
        return spec
    mine = frozenset(key.removeprefix(f"{part}:") for key in spec.lokr_whole_w2 if key.startswith(f"{part}:"))
    return replace(spec, lokr_whole_w2=mine)


def lokr_layer_key(path: str) -> str:
    """A layer's path as `AdapterSpec.lokr_whole_w2` holds it: `_` for `.`, without CLIP's `text_model.`
    (a file's paths and a module's match as `lora.load_lora_state_dict` matches them)."""
    return path.replace(".", "_").removeprefix("text_model_")


def dora_axis(tensors: Mapping[str, torch.Tensor]) -> str | None:
    return "output" if DORA_OUT in tensors else "input" if DORA_IN in tensors else None


def describe(parts: Mapping[str, Mapping[str, torch.Tensor]]) -> tuple[str, str | None]:
    """(peft type, DoRA axis or None) of peft-form parts; ValueError if the layers mix them."""
    kinds: set[tuple[str, str | None]] = set()
    for sd in parts.values():
        for path, tensors in group_layers(sd).items():
            kinds.add((check_layer(path, tensors), dora_axis(tensors)))
    if len(kinds) > 1:
        raise ValueError(f"The LoRA mixes layer kinds {sorted(kinds, key=str)}; only one kind per file is supported.")
    return kinds.pop() if kinds else (LORA, None)


def group_layers(sd: Mapping[str, torch.Tensor], what: str = "LoRA") -> dict[str, dict[str, torch.Tensor]]:
    """Peft-form state -> {module path: {state name: tensor}}."""
    layers: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in sd.items():
        split = split_key(key)
        if split is None:
            raise ValueError(f"Not a {what} adapter key: {key!r}.")
        layers.setdefault(split[0], {})[split[1]] = tensor
    return layers


def scale_layer(tensors: Mapping[str, torch.Tensor], factor: float) -> dict[str, torch.Tensor]:
    """The layer with its weight delta multiplied by `factor` (one factor matrix scaled)."""
    if layer_type(tensors) == OFT_2:
        if factor != 1.0:
            raise ValueError("An OFT layer rotates the weight; it has no scale (weight or alpha) to change.")
        return dict(tensors)
    name = next(n for n in ("lora_B.weight", "hada_w1_a", "lokr_w1", "lokr_w1_a") if n in tensors)
    t = tensors[name]  # float32 at least: a bfloat16 file's layer rescaled keeps its delta exact
    return {**tensors, name: (t.float() * factor).to(torch.promote_types(t.dtype, torch.float32))}


def is_unit_scale(tensors: Mapping[str, torch.Tensor]) -> bool:
    """A LoKr layer of two full matrices: LyCORIS and ComfyUI apply it with scale 1, whatever its alpha."""
    return "lokr_w1" in tensors and "lokr_w2" in tensors


# -- kohya / LyCORIS entries of one layer ---------------------------------------------------


def to_kohya(tensors: Mapping[str, torch.Tensor], rank: int, alpha: float) -> dict[str, torch.Tensor]:
    """One layer's kohya entries (without `alpha`): lora_down/lora_up (+ dora_scale), hada_*, lokr_*."""
    if layer_type(tensors) == LORA:
        down, up = tensors["lora_A.weight"], tensors["lora_B.weight"]
        out = {"lora_down.weight": down, "lora_up.weight": up}
        if DORA_OUT in tensors:  # LyCORIS's output-axis dora_scale is (out, 1[, 1, 1])
            out["dora_scale"] = tensors[DORA_OUT].reshape(up.shape[0], *[1] * (down.dim() - 1))
        elif DORA_IN in tensors:
            out["dora_scale"] = tensors[DORA_IN]
        return out
    out = dict(tensors)
    if DORA_OUT in out:  # DoRA on LoKr, output axis: LyCORIS's (out, 1[, 1, 1])
        magnitude = out.pop(DORA_OUT)
        out["dora_scale"] = magnitude.reshape(magnitude.numel(), *[1] * max(magnitude.dim() - 1, 1))
    elif DORA_IN in out:
        out["dora_scale"] = out.pop(DORA_IN)
    if is_unit_scale(tensors):  # readers ignore alpha here, so peft's alpha / rank goes into w1
        out["lokr_w1"] = (tensors["lokr_w1"].float() * (alpha / rank)).to(tensors["lokr_w1"].dtype)
    return out


def from_kohya(name: str, entries: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], float | None]:
    """One kohya layer's entries -> (peft-form tensors, alpha or None). A LoKr layer of two full
    matrices is returned at scale 1 (see `is_unit_scale`); the caller rescales it."""
    alpha = float(entries["alpha"].item()) if "alpha" in entries else None
    rest = {k: v for k, v in entries.items() if k != "alpha"}
    if set(rest) & {*LOHA_KEYS, *LOKR_KEYS, *OFT_KEYS}:
        if "dora_scale" in rest and layer_type(rest) == LOKR:
            rest.update(_lokr_dora_from_kohya(name, rest.pop("dora_scale"), rest))
        check_layer(name, rest)
        return rest, alpha
    extra = set(rest) - {"lora_down.weight", "lora_up.weight", "dora_scale"}
    if extra or "lora_down.weight" not in rest or "lora_up.weight" not in rest:
        raise ValueError(
            f"Unsupported LoRA layer {name!r} (entries {sorted(entries)}); supported are LoRA (lora_down/lora_up, "
            "DoRA's dora_scale), LoHa (hada_*), LoKr (lokr_*) and OFT v2 (oft_R)."
        )
    down, up = rest["lora_down.weight"], rest["lora_up.weight"]
    out = {"lora_A.weight": down, "lora_B.weight": up}
    if "dora_scale" in rest:
        out.update(_dora_from_kohya(name, rest["dora_scale"], down, up))
    return out, alpha


def _dora_from_kohya(name: str, scale: torch.Tensor, down: torch.Tensor, up: torch.Tensor) -> dict[str, torch.Tensor]:
    rest = (1,) * (down.dim() - 2)
    if tuple(scale.shape) == (1, down.shape[1], *rest):
        return {DORA_IN: scale}
    if tuple(scale.shape) == (up.shape[0], 1, *rest):
        return {DORA_OUT: scale.reshape(magnitude_shape((up.shape[0], down.shape[1], *rest), True))}
    raise ValueError(
        f"Unsupported DoRA scale of layer {name!r}: shape {tuple(scale.shape)}; expected (1, {down.shape[1]}, ...) "
        f"(input axis) or ({up.shape[0]}, 1, ...) (output axis), as LyCORIS writes it."
    )


def _lokr_dora_from_kohya(name: str, scale: torch.Tensor, t: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A LoKr layer's `dora_scale`: (out, 1[, 1, 1]) on the output axis, (1, in[, 1, 1]) on the input axis."""
    rows = t["lokr_w1"].shape[0] if "lokr_w1" in t else t.get("lokr_w1_a", scale).shape[0]
    if "lokr_w2" in t:
        rows *= t["lokr_w2"].shape[0]
    elif "lokr_w2_a" in t:
        rows *= t["lokr_w2_a"].shape[1 if "lokr_t2" in t else 0]
    if scale.dim() >= 2 and scale.shape[0] == rows and scale.shape[1:].numel() == 1 and rows != 1:
        return {DORA_OUT: scale.reshape(-1) if scale.dim() == 2 else scale.reshape(1, rows, *scale.shape[2:])}
    if scale.dim() >= 2 and scale.shape[0] == 1:
        return {DORA_IN: scale}
    raise ValueError(
        f"Unsupported DoRA scale of LoKr layer {name!r}: shape {tuple(scale.shape)}; expected ({rows}, 1, ...) "
        "(output axis) or (1, in, ...) (input axis), as LyCORIS writes it."
    )


def kohya_network_metadata(kind: str, dora: str | None) -> dict[str, str]:
    """sd-scripts / LyCORIS metadata naming the network the file holds (informational for loaders)."""
    import json

    if (kind == LORA and dora is None) or kind == OFT_2:  # OFT v2: no LyCORIS algorithm
        return {}
    args: dict[str, str] = {"algo": {LORA: "lora", LOHA: "loha", LOKR: "lokr"}[kind]}
    if dora is not None:
        args.update({"dora_wd": "True", "wd_on_out": str(dora == "output")})
    return {"ss_network_module": "lycoris.kohya", "ss_network_args": json.dumps(args)}


# -- config checks --------------------------------------------------------------------------


def _dora_wanted(spec: AdapterSpec) -> str | None:
    if spec.peft_type == LOKR and spec.lokr_decompose:
        return "output" if spec.lokr_dora_output else "input"
    return ("output" if spec.output_axis else "input") if spec.peft_type == LORA and spec.decompose else None


def check_output_format(spec: AdapterSpec, diffusers_keys: bool) -> None:
    """Input-axis DoRA has no diffusers/PEFT form (peft decomposes on the output axis)."""
    if diffusers_keys and spec.peft_type == LOKR and spec.lokr_decompose:
        raise ValueError(
            "output_model_format: this format writes diffusers/PEFT keys, and peft's LoKr layers have no DoRA; save as "
            "KOHYA_LORA (LyCORIS keys with dora_scale), or turn lokr_weight_decompose off"
        )
    if diffusers_keys and _dora_wanted(spec) == "input":
        raise ValueError(
            "output_model_format: this format writes diffusers/PEFT keys, and peft/diffusers take DoRA's norm on the "
            "output axis; turn lora_decompose_output_axis on, or save as KOHYA_LORA (A1111, ComfyUI, Forge)"
        )


def check_start_file(spec: AdapterSpec, parts: Mapping[str, Mapping[str, torch.Tensor]], path: Any) -> AdapterSpec:
    """A LoRA to continue from must hold the adapter the config trains (ValueError naming the field).
    Returns the spec to continue with: an OFT v2 file's block size and sharing, a LoKr file's whole
    or decomposed factors, as a LoRA file's rank, are the file's."""
    kind, axis = describe(parts)
    if kind != spec.peft_type:
        raise ValueError(f"lora_model_name: {path}: {kind} layers, but peft_type is {spec.peft_type}; set peft_type to {kind}")
    if kind == OFT_2:
        scaled = any(k.endswith("." + OFT_SCALED) for sd in parts.values() for k in sd)
        if scaled != spec.oft_scaled:
            raise ValueError(f"lora_model_name: {path}: {'Scaled' if scaled else 'unscaled'} OFT; turn oft_scaled {'on' if scaled else 'off'}")
        layers = {f"{part}.{name}": t for part, sd in parts.items() for name, t in group_layers(sd).items()}
        layout = oft.spec_fields(layers.values())
        if other := oft.other_block_sizes(layers, layout["oft_block_size"]):
            raise ValueError(oft.oft_sizes_refusal(path, layers, other, layout["oft_block_size"]))
        return replace(spec, oft_block_size=layout["oft_block_size"], oft_block_share=layout["oft_block_share"])
    if kind == LOKR:  # LyCORIS's full_matrix / decompose_both / use_tucker as the file's layers are (else they would not fit)
        # per part: SDXL's two CLIPs have the same layer paths, one's w2 whole where the other's is a product
        layers = {(part, path): t for part, sd in parts.items() for path, t in group_layers(sd).items()}
        spec = replace(spec, lokr_full_matrix=all("lokr_w2" in t for t in layers.values()),
                       decompose_both=all("lokr_w1_a" in t for t in layers.values()),
                       use_tucker=any("lokr_t2" in t for t in layers.values()),
                       # whole beside products (LyCORIS's dim at least half a factor's side, a conv_dim over dim):
                       # peft would build a product at the file's rank; a whole factor takes a product multiplied out
                       lokr_whole_w2=frozenset(f"{part}:{lokr_layer_key(p)}" for (part, p), t in layers.items() if "lokr_w2" in t))
    wanted = _dora_wanted(spec)
    if axis == wanted:
        return spec
    switch, axis_switch = ("lokr_weight_decompose", "lokr_dora_on_output") if kind == LOKR else ("lora_decompose", "lora_decompose_output_axis")
    if axis is None:
        raise ValueError(f"lora_model_name: {path}: {kind} layers without DoRA; turn {switch} off")
    flag = "on" if axis == "output" else "off"
    if wanted is None:
        raise ValueError(f"lora_model_name: {path}: DoRA layers; turn {switch} on ({axis_switch} {flag})")
    raise ValueError(f"lora_model_name: {path}: DoRA decomposed on the {axis} axis; turn {axis_switch} {flag}")
