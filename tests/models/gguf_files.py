"""Tiny .gguf transformer files, as city96's GGUF conversions lay them out: the original
checkpoint's key names, the Linear weights (2-D `.weight`s) whose rows split into 32-value
blocks quantized to Q8_0, every other tensor (biases, norms, pad tokens) kept in float32."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

Q8_BLOCK = 32  # values per Q8_0 block


def q8_quantizable(key: str, tensor: torch.Tensor) -> bool:
    return key.endswith(".weight") and tensor.ndim == 2 and tensor.shape[-1] % Q8_BLOCK == 0


def write_gguf(weights: Mapping[str, torch.Tensor], path: Path, architecture: str) -> Path:
    """`weights` (a transformer file's state dict) written as a GGUF file at `path`."""
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    for key, tensor in weights.items():
        values = tensor.float().numpy()
        if q8_quantizable(key, tensor):
            kind = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(key, gguf.quants.quantize(values, kind), raw_dtype=kind)
        else:
            writer.add_tensor(key, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
