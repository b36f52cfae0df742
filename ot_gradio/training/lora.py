"""LoRA adapters (peft) on the SD 1.x UNet and CLIP text encoder, with OneTrainer's layer presets.

The adapters are peft `LoraLayer`s, so scale = alpha / rank exactly as in kohya files and in
OneTrainer (default rank 16, alpha 1.0); `lora_variants.py` adds DoRA, LoHa, LoKr and OFT v2
(an `AdapterSpec`; OFT in oft.py). `lora_format.py` writes and reads them as files.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping

import torch
from torch import nn

from . import oft
from .lokr_switches import install_lokr_switches, lokr_injection, nominal_factor
from .lora_layer_entries import lokr_layer_key, split_key
from .lora_variants import (
    ADAPTER_NAME,
    LOHA,
    LOKR,
    LORA,
    OFT_2,
    AdapterSpec,
    adapter_parameters,
    init_loha_like_lycoris,
    install_decomposition,
    install_real_shape_deltas,
    is_adapter_layer,
    layer_rank_alpha,
    peft_config,
    peft_injection,
)

LORA_KINDS = ("unet", "text_encoder")

# OneTrainer's presets are substrings of module paths (BaseStableDiffusionSetup.LAYER_PRESETS);
# "attentions" takes the whole Transformer2D block: proj_in/out, attn1, attn2 and ff.
# An empty list means every layer of the target types.
LAYER_PRESETS: dict[str, dict[str, list[str]]] = {
    "unet": {"full": [], "attn-mlp": ["attentions"], "attn-only": ["attn"]},
    "text_encoder": {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"]},
}
PRESET_NAMES = ("full", "attn-mlp", "attn-only", "custom")

_TARGET_TYPES: dict[str, tuple[type[nn.Module], ...]] = {
    "unet": (nn.Linear, nn.Conv2d),
    "text_encoder": (nn.Linear,),
}


def _check_kind(kind: str) -> None:
    if kind not in LORA_KINDS:
        raise ValueError(f"Unknown LoRA target {kind!r}; expected one of {', '.join(LORA_KINDS)}.")


def text_model_prefix(module: nn.Module) -> str:
    """'text_model.' when a CLIP text model is flattened (transformers >= 5.6), else ''.

    Single-file LoRAs, OneTrainer filters and older diffusers name CLIP layers
    `text_model.encoder.layers.N...`; transformers 5.6+ dropped the wrapper, so we add it back
    when naming layers to the outside world. Other text encoders (T5) never had it.
    """
    if hasattr(module, "text_model") or not hasattr(module, "encoder") or not hasattr(module, "embeddings"):
        return ""
    return "text_model."


def public_name(module: nn.Module, kind: str, name: str) -> str:
    """The module path users and files see (CLIP layers always under `text_model.`)."""
    return (text_model_prefix(module) if kind == "text_encoder" else "") + name


def parse_layer_filter(layer_filter: str, regex: bool = False) -> list[str]:
    """Comma-separated entries, as OneTrainer splits them; blank entries are dropped (a stray
    comma must not silently select every layer). Bad regexes raise ValueError."""
    entries = [e.strip() for e in layer_filter.split(",")]
    entries = [e for e in entries if e]
    for e in entries:
        if not e.isprintable():
            raise ValueError(f"Layer filter contains non-printable characters: {e!r}")
        if regex:
            try:
                re.compile(e)
            except re.error as err:
                raise ValueError(f"Invalid layer filter regex {e!r}: {err}") from err
    return entries


def filter_entries(layer_preset: str, layer_filter: str, regex: bool, table: Mapping[str, list[str]]) -> tuple[list[str], bool]:
    """(entries, whether they are regexes) of a layer preset, or of the filter with "custom";
    no entries: every layer. A preset name this model type lacks (OneTrainer's Würstchen
    `down-blocks`, ...) takes the filter, which is what OneTrainer's code reads."""
    if layer_preset == "custom" or (layer_preset not in table and layer_filter.strip()):
        return parse_layer_filter(layer_filter, regex), regex
    if layer_preset in table:
        return list(table[layer_preset]), False
    raise ValueError(f"Unknown layer preset {layer_preset!r}; expected one of {', '.join([*table, 'custom'])}.")


def entry_matches(entry: str, name: str, regex: bool) -> bool:
    return re.search(entry, name) is not None if regex else entry in name


def select_lora_targets(
    module: nn.Module,
    *,
    kind: str,
    layer_preset: str,
    layer_filter: str = "",
    layer_filter_regex: bool = False,
    presets: Mapping[str, list[str]] | None = None,
) -> list[str]:
    """Names (as in `module.named_modules()`) of the layers `add_lora` would wrap.

    `presets` replaces the kind's preset table (LAYER_PRESETS) for families whose module names
    differ (a transformer denoiser has no "attentions" blocks).

    Matching is done on the public name (`public_name`), so a filter written for OneTrainer or
    for kohya-style names works whatever the transformers version. Every filter entry must match
    at least one layer, otherwise ValueError names the entries that matched nothing.
    """
    _check_kind(kind)
    entries, regex = filter_entries(layer_preset, layer_filter, layer_filter_regex,
                                    presets if presets is not None else LAYER_PRESETS[kind])
    types = _TARGET_TYPES[kind]
    selected: list[str] = []
    used: set[str] = set()
    for name, child in module.named_modules():
        if not name or not isinstance(child, types) or _is_inside_lora_layer(name):
            continue
        if getattr(child, "groups", 1) > 1:  # grouped / depthwise convs (Sana's ff.conv_depth): no LoRA form
            continue
        if not entries:
            selected.append(name)
            continue
        full = public_name(module, kind, name)
        hits = [e for e in entries if entry_matches(e, full, regex)]
        if hits:
            used.update(hits)
            selected.append(name)

    unused = [e for e in entries if e not in used]
    if unused:
        what = "regex" if regex else "filter"
        raise ValueError(
            f"Layer {what} {', '.join(repr(e) for e in unused)} matched no {kind} layer (e.g. {_example_names(module, kind)})."
        )
    if not selected:
        raise ValueError(f"No {kind} layer to put LoRA on.")
    return selected


def _is_inside_lora_layer(name: str) -> bool:
    parts = name.split(".")
    return any(p in ("lora_A", "lora_B", "base_layer", "lora_dropout") for p in parts)


def _example_names(module: nn.Module, kind: str) -> str:
    types = _TARGET_TYPES[kind]
    names = [public_name(module, kind, n) for n, m in module.named_modules() if n and isinstance(m, types)]
    picks = names[:: max(1, len(names) // 3)][:3]
    return ", ".join(picks)


def lora_layers(module: nn.Module) -> dict[str, nn.Module]:
    """The peft adapter layers (LoRA, DoRA, LoHa, LoKr) of `module`, by module path."""
    return {name: child for name, child in module.named_modules() if is_adapter_layer(child)}


def has_lora(module: nn.Module) -> bool:
    return bool(lora_layers(module))


@contextlib.contextmanager
def adapters_disabled(modules: Iterable[nn.Module]) -> Iterator[None]:
    """The modules as they were before their adapters were added (masked prior preservation's
    base model). Only peft's switch is flipped: the adapters' `requires_grad` stays as it is,
    which peft's `enable_adapters` would change."""
    layers = [layer for module in modules for layer in lora_layers(module).values()]
    before = [layer._disable_adapters for layer in layers]
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer, state in zip(layers, before, strict=True):
            layer._disable_adapters = state


def add_lora(
    module: nn.Module,
    *,
    kind: str,
    rank: int,
    alpha: float,
    dropout: float,
    layer_preset: str,
    layer_filter: str = "",
    layer_filter_regex: bool = False,
    dtype: torch.dtype = torch.float32,
    presets: Mapping[str, list[str]] | None = None,
    spec: AdapterSpec | None = None,
) -> list[nn.Parameter]:
    """Wrap the selected layers of `module` with LoRA (or `spec`'s variant) and freeze everything else.

    Down (A) weights start Kaiming-uniform and up (B) weights at zero (LoHa/LoKr: one factor at
    zero, as LyCORIS and OneTrainer start them; DoRA: magnitude = the base weight's norms), so the
    model is unchanged until the first step. Returns the trainable adapter parameters (in `dtype`).
    """
    from peft import inject_adapter_in_model

    from .lora_forward import install_lora_forward  # noqa: PLC0415

    spec = spec or AdapterSpec()

    if rank < 1:
        raise ValueError(f"LoRA rank must be at least 1, got {rank}.")
    if alpha <= 0:
        raise ValueError(f"LoRA alpha must be positive, got {alpha}.")
    if not 0 <= dropout < 1:
        raise ValueError(f"LoRA dropout must be in [0, 1), got {dropout}.")
    if has_lora(module):
        raise ValueError(f"The {kind} already has LoRA layers.")
    targets = select_lora_targets(
        module, kind=kind, layer_preset=layer_preset, layer_filter=layer_filter, layer_filter_regex=layer_filter_regex,
        presets=presets,
    )
    config = peft_config(spec, rank=rank, alpha=alpha, dropout=dropout, targets=targets)
    module.requires_grad_(False)
    whole_w2 = [module.get_submodule(t) for t in targets
                if {lokr_layer_key(t), lokr_layer_key(public_name(module, kind, t))} & spec.lokr_whole_w2]
    with peft_injection(), lokr_injection(spec, whole_w2):
        inject_adapter_in_model(config, module, adapter_name=ADAPTER_NAME)
    if spec.peft_type in (LOHA, LOKR):
        install_real_shape_deltas(module)
    if spec.peft_type == LOHA:
        init_loha_like_lycoris(module)
    if spec.peft_type == LOKR:
        install_lokr_switches(module, spec)
    if spec.peft_type == LORA and spec.decompose:
        install_decomposition(module, spec)
    if spec.peft_type == OFT_2:
        oft.install_oft(module, scaled=spec.oft_scaled, dropout=dropout)

    params: list[nn.Parameter] = []
    layers = list(lora_layers(module).values())
    for layer in layers:
        for p in adapter_parameters(layer).values():
            with torch.no_grad():
                p.data = p.data.to(dtype=dtype)
            p.requires_grad_(True)
            params.append(p)
    install_lora_forward(layers)  # plain LoRA layers: the same sum in fewer operations (lora_forward.py)
    _pad_like_base(layers)
    return params


def _pad_like_base(layers: list[nn.Module]) -> None:
    """A LoRA down convolution pads as its base convolution does (circular with force_circular_padding),
    so the adapter's output tiles as the base layer's does."""
    for layer in layers:
        base = getattr(layer, "base_layer", None)
        if isinstance(base, nn.Conv2d) and base.padding_mode != "zeros":
            for down in getattr(layer, "lora_A", {}).values():
                if isinstance(down, nn.Conv2d):
                    down.padding_mode = base.padding_mode


def lora_rank_alpha(module: nn.Module) -> tuple[int, float]:
    """The rank and alpha shared by all LoRA layers of `module` (ValueError if they differ)."""
    layers = lora_layers(module)
    if not layers:
        raise ValueError("The module has no LoRA layers.")
    pairs = {layer_rank_alpha(layer) for layer in layers.values()}
    if len(pairs) > 1:
        raise ValueError(f"LoRA layers have different rank/alpha: {sorted(pairs)}.")
    return pairs.pop()


def lora_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """Adapter weights in peft form (detached): `<module path>.lora_A.weight` / `.lora_B.weight`
    (+ DoRA's `.lora_magnitude_vector` or `.dora_scale`), `.hada_w1_a`..., `.lokr_w1`...,
    `.oft_R.weight` (+ `.oft_R.scaled_oft`, Scaled OFT's marker)."""
    out: dict[str, torch.Tensor] = {}
    for name, layer in lora_layers(module).items():
        tensors = {k: p.detach() for k, p in adapter_parameters(layer).items()}
        if (factor := nominal_factor(layer)) != 1.0:  # a whole-pair LoKr layer trains at scale 1
            tensors["lokr_w1"] = tensors["lokr_w1"].float() * factor  # float32: the way back is exact
        out.update({f"{name}.{k}": t for k, t in tensors.items()})
        out.update({f"{name}.{k}": v for k, v in oft.state_extras(layer).items()})
    return out


def file_layers(module: nn.Module, kind: str, state_dict: Mapping[str, torch.Tensor]) -> tuple[str, list[str]]:
    """For continuing a LoRA file: an anchored regex (for `add_lora`'s custom layer filter) that
    selects exactly the layers of `module` the file (`state_dict`, in peft form) holds adapters
    for, whatever preset trained it, and the file's layer paths `module` has no layer for. Names
    match as `load_lora_state_dict` matches them (CLIP's `text_model.` prefix or not, `_` for `.`)."""
    aliases: dict[str, str] = {}
    for name in select_lora_targets(module, kind=kind, layer_preset="custom"):  # every layer a LoRA can wrap
        for alias in (name, public_name(module, kind, name)):
            aliases[alias] = aliases[alias.replace(".", "_")] = public_name(module, kind, name)
    found: dict[str, None] = {}
    unknown: list[str] = []
    for path in dict.fromkeys(split[0] for key in state_dict if (split := split_key(key))):
        target = aliases.get(path) or aliases.get("text_model." + path) or aliases.get(path.replace(".", "_"))
        if target is None:
            unknown.append(path)
        else:
            found[target] = None
    return "^(?:" + "|".join(re.escape(name) for name in found) + ")$", unknown


def _whole_lokr_factors(tensors: Mapping[str, torch.Tensor], params: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """A LoKr factor the layer holds whole (`lokr_w1` / `lokr_w2`) that the file gives as a product
    (`_a @ _b`, or the Tucker form with `lokr_t2`): multiplied out, the same delta. peft builds a factor
    whole once the rank is at least half its larger side, so a layer of a smaller rank padded to the
    file's largest (LyCORIS' conv_dim under its dim: lora_reading._pad_rank) can be built whole."""
    out = dict(tensors)
    for i in (1, 2):
        whole, up, down, core = f"lokr_w{i}", f"lokr_w{i}_a", f"lokr_w{i}_b", f"lokr_t{i}"
        if whole not in params or whole in out or up not in out or down not in out:
            continue
        a, b = out[up].float(), out[down].float()
        if core in out:
            product = torch.einsum("ijkl,ip,jr->prkl", out[core].float(), a, b)
        elif a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0]:
            product = a @ b
        else:
            continue  # not a product: the check below names the layer
        shape = params[whole].shape  # a convolution's product is (out, in x kernel): its rows are the layer's
        if product.shape == shape or (product.dim() == 2 and product.shape == (shape[0], shape[1:].numel())):
            out = {k: v for k, v in out.items() if k not in (up, down, core)}
            out[whole] = product.reshape(shape)
    return out


def load_lora_state_dict(module: nn.Module, state_dict: Mapping[str, torch.Tensor], *, kind: str, strict: bool = True) -> None:
    """Copy peft-form adapter weights (as `load_lora_file` returns them) into `module`'s layers.

    Keys may carry CLIP's `text_model.` prefix or not, and module paths written with `_` instead
    of `.` are matched too. With `strict`, a file layer that has no adapter layer here, or an
    adapter layer the file does not fill (or fills with another variant's weights), raises
    ValueError (shape mismatches always do).
    """
    _check_kind(kind)
    layers = lora_layers(module)
    if not layers:
        raise ValueError(f"The {kind} has no LoRA layers; call add_lora first.")
    by_public = {public_name(module, kind, n): n for n in layers}
    by_public.update({n: n for n in layers})
    by_flat = {k.replace(".", "_"): n for k, n in by_public.items()}

    pending: dict[str, dict[str, torch.Tensor]] = {}
    unknown: list[str] = []
    for key, tensor in state_dict.items():
        split = split_key(key)
        path = split[0] if split else ""
        name = split and (by_public.get(path) or by_public.get("text_model." + path) or by_flat.get(path.replace(".", "_")))
        if not name:
            unknown.append(key)
            continue
        if split[1] == oft.OFT_SCALED:
            continue  # a marker, checked against oft_scaled where the file is chosen (check_start_file)
        pending.setdefault(name, {})[split[1]] = tensor

    targets = {name: adapter_parameters(layer) for name, layer in layers.items()}
    pending = {name: _whole_lokr_factors(tensors, targets[name]) for name, tensors in pending.items()}
    missing = [n for n in layers if set(pending.get(n, {})) != set(targets[n])]
    if strict and (unknown or missing):
        detail = [f"{n}: has {sorted(targets[n])}, got {sorted(pending.get(n, {}))}" for n in missing[:2]]
        raise ValueError(
            f"LoRA weights do not fit the {kind}: {len(unknown)} unknown key(s) {unknown[:3]}, "
            f"{len(missing)} layer(s) without matching weights {detail}."
        )
    with torch.no_grad():
        for name, tensors in pending.items():
            if (factor := nominal_factor(layers[name])) != 1.0 and "lokr_w1" in tensors:
                tensors = {**tensors, "lokr_w1": tensors["lokr_w1"].float() / factor}  # peft form -> the live scale 1
            for which, tensor in tensors.items():
                target = targets[name].get(which)
                if target is None:
                    continue  # another variant's weight; only reached with strict=False
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(
                        f"LoRA {which} weight of {name} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)} "
                        "(different rank, LoKr factor, OFT block size or adapter settings?)."
                    )
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
