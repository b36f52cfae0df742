"""A family's transformer in a file of its own (`transformer.model_name`, or a transformer file as
the base model): what diffusers' `from_single_file` reads for it, and its tensors for the families
with their own key converter (Flux.1, HunyuanVideo, Stable Cascade): a .safetensors file's, with
ComfyUI's quantized weights read back to their values (models/comfy_quant.py), or a .gguf file's,
whose quantized Linear weights stay so (diffusers' GGUF layers)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from .errors import ModelLoadError


def gguf_options(path: Path, dtype: torch.dtype) -> dict:
    """diffusers' `from_single_file` keywords for a transformer file: a .gguf file (weight_dtype
    GGUF) keeps its quantized Linear weights, dequantized per forward into `dtype`."""
    if path.suffix.lower() != ".gguf":
        return {}
    from diffusers import GGUFQuantizationConfig

    return {"quantization_config": GGUFQuantizationConfig(compute_dtype=dtype)}


def read_transformer_file(path: Path, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """A transformer file's tensors: a .safetensors file's (ComfyUI's scaled or mixed-precision FP8
    / INT8 weights read back to their values in `dtype`: models/comfy_quant.py), or a .gguf file's
    (its quantized weights as diffusers' GGUFParameter bytes, row slices of them still whole rows of blocks)."""
    if path.suffix.lower() == ".gguf":
        from diffusers.models.model_loading_utils import load_gguf_checkpoint

        return load_gguf_checkpoint(str(path))
    from .comfy_quant import load_values

    return _refusing_unread(path, lambda: load_values(path, dtype))


def transformer_file_source(path: Path, dtype: torch.dtype) -> str | dict[str, torch.Tensor]:
    """What diffusers' `from_single_file` reads for a transformer file: its path, or, for a file in
    one of ComfyUI's quantized layouts (which diffusers would read without their scales), its
    weights read back to their values in `dtype`."""
    from .comfy_quant import quantized_file, read_dequantized

    if path.suffix.lower() in (".safetensors", ".sft") and quantized_file(path):
        return _refusing_unread(path, lambda: read_dequantized(path, dtype))
    return str(path)


def _refusing_unread(path: Path, read):
    """`read()`, a format of ComfyUI's not read here a ModelLoadError naming the file."""
    from .comfy_quant import UnreadQuantization

    try:
        return read()
    except UnreadQuantization as e:
        raise ModelLoadError(f"{path.name} holds weights quantized in a layout not read here ({e}); give the model's bf16, fp16, "
                             "fp8 or ComfyUI's fp8 / int8 file (a .gguf also loads), and set the Weight data type to quantize it.") from e


def assign_converted_weights(module: torch.nn.Module, weights: Mapping[str, torch.Tensor], dtype: torch.dtype) -> None:
    """`weights` (converted by a family's own key converter, from `read_transformer_file`) put into
    `module` built on the meta device: floating weights in `dtype`; where the file was GGUF, the
    Linear layers of its quantized weights become diffusers' GGUF layers computing in `dtype`
    (their weights keep the file's byte shape, which load_state_dict would refuse)."""
    from diffusers.quantizers.gguf.utils import GGUFParameter, _replace_with_gguf_linear

    weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}
    if not any(isinstance(v, GGUFParameter) for v in weights.values()):
        module.load_state_dict(weights, strict=True, assign=True)
        return
    _replace_with_gguf_linear(module, dtype, weights)
    missing = set(module.state_dict()) ^ set(weights)
    if missing:
        raise ValueError(f"the converted weights do not match the transformer: {sorted(missing)[:3]}")
    for key, value in weights.items():
        owner, _, name = key.rpartition(".")
        target = module.get_submodule(owner)
        if name in target._parameters:
            target._parameters[name] = value if isinstance(value, torch.nn.Parameter) else torch.nn.Parameter(value, requires_grad=False)
        else:
            target._buffers[name] = value
