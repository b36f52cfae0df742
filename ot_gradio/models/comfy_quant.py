"""ComfyUI's quantized weight files read back to their values, as its loader computes them.

Two layouts: its scaled FP8 (a `scaled_fp8` marker and a `scale_weight` per layer: the weight
times its scale, one per tensor or per row), and its mixed-precision one, where each quantized
layer is named with its format, in a `<layer>.comfy_quant` entry (JSON bytes) or the file's
`_quantization_metadata` (`{"layers": {layer: {"format": ...}}}`), beside its `weight_scale`.
FP8 (e4m3fn, e5m2) and INT8 with one scale per tensor or per row are the weight times its scale
(ComfyUI's TensorCoreFP8Layout and TensorWiseINT8Layout); the block-scaled and rotated formats
(nvfp4, mxfp8, convrot, asym_w4a8 ...) are refused, naming the format.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .. import jsontext

# per-layer entries that are no weights: scales, ComfyUI's format notes
SCALE_SUFFIXES = (".scale_weight", ".weight_scale", ".weight_scale_2", ".input_scale", ".scale_input", ".comfy_quant")
READ = ("float8_e4m3fn", "float8_e5m2", "int8_tensorwise")


class UnreadQuantization(ValueError):
    """A layer quantized in a format this reader does not multiply back; its message names it."""


def is_scale(key: str) -> bool:
    return is_marker(key) or key.endswith(SCALE_SUFFIXES)


def is_marker(key: str) -> bool:
    """ComfyUI's scaled FP8 marker, also under a checkpoint's prefix (`model.diffusion_model.scaled_fp8`)."""
    return key == "scaled_fp8" or key.endswith(".scaled_fp8")


def quantized_layers(f, keys: list[str]) -> dict[str, dict]:
    """Layer name -> its format spec, from `<layer>.comfy_quant` entries and the file's
    `_quantization_metadata`; UnreadQuantization for a format not in READ or a rotated layer."""
    layers: dict[str, dict] = {}
    raw = (f.metadata() or {}).get("_quantization_metadata")
    if raw:
        try:
            listed = jsontext.loads(raw).get("layers") or {}
        except (ValueError, AttributeError):
            raise UnreadQuantization("its _quantization_metadata is not JSON") from None
        layers |= {str(k): v if isinstance(v, dict) else {"format": str(v)} for k, v in listed.items()}
    for key in keys:
        if key.endswith(".comfy_quant"):
            try:
                spec = jsontext.loads(bytes(f.get_tensor(key).to(torch.uint8).tolist()).decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                raise UnreadQuantization(f"{key} is not ComfyUI's JSON format note") from None
            layers[key.removesuffix(".comfy_quant")] = spec if isinstance(spec, dict) else {"format": str(spec)}
    for layer, spec in layers.items():
        fmt = str(spec.get("format"))
        if fmt not in READ or spec.get("convrot"):
            raise UnreadQuantization(f"{layer} is quantized as {fmt}{' with convrot' if spec.get('convrot') else ''}")
    return layers


def dequantize(f, key: str, tensor: torch.Tensor, names: set[str], layers: Mapping[str, dict], scaled_fp8: bool) -> torch.Tensor:
    """A `.weight` of a quantized layer times its scale (one per tensor or per row), in float32;
    any other tensor as it is."""
    if not key.endswith(".weight"):
        return tensor
    layer = key.removesuffix(".weight")
    if scaled_fp8 and f"{layer}.scale_weight" in names:
        scale = f.get_tensor(f"{layer}.scale_weight")
    elif f"{layer}.weight_scale" in names:
        if layer not in layers and tensor.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8):
            raise UnreadQuantization(f"{layer} has a weight_scale beside a {str(tensor.dtype).removeprefix('torch.')} weight and no format note")
        scale = f.get_tensor(f"{layer}.weight_scale")
    else:
        if layer in layers:
            raise UnreadQuantization(f"{layer} is quantized but has no weight_scale")
        return tensor
    scale = scale.float()
    if scale.numel() == 1:
        return tensor.float() * scale.reshape(())
    if scale.numel() == tensor.shape[0]:  # one per row (output channel)
        return tensor.float() * scale.reshape(-1, *([1] * (tensor.ndim - 1)))
    raise UnreadQuantization(f"{layer}'s weight_scale has {scale.numel()} values (block-scaled), not one per tensor or row")


def quantized_file(path) -> bool:
    """Whether a .safetensors file holds weights in one of ComfyUI's quantized layouts (its header alone is read)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return "_quantization_metadata" in (f.metadata() or {}) or any(is_scale(k) for k in f.keys())


def load_values(path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A .safetensors file's tensors: a ComfyUI-quantized one's read back to their values in `dtype`
    (`read_dequantized`), any other's as stored."""
    from safetensors.torch import load_file

    return read_dequantized(path, dtype) if quantized_file(path) else load_file(str(path))


def read_dequantized(path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A ComfyUI-quantized file's tensors with each quantized weight read back to its value, in
    `dtype` (the other tensors as stored), without the scales and format notes; UnreadQuantization
    for a format not read."""
    return {key: value.to(dtype) if quantized else value for key, value, quantized in tensors_of(path)}


def tensors_of(path, skip=lambda key: False):
    """Each (key, value, whether it was quantized) of a .safetensors file, ComfyUI's quantized
    weights read back to their values (in float32), without the scales, format notes and the keys
    `skip` names; UnreadQuantization for a format not read."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        keys = list(f.keys())
        names, scaled = set(keys), any(is_marker(k) for k in keys)
        if not scaled and (stray := next((k for k in keys if k.endswith(".scale_weight")), None)):
            raise UnreadQuantization(f"{stray} without ComfyUI's scaled_fp8 marker")
        layers = quantized_layers(f, keys)
        for key in keys:
            if is_scale(key) or skip(key):
                continue
            stored = f.get_tensor(key)
            value = dequantize(f, key, stored, names, layers, scaled)
            yield key, value, value is not stored
