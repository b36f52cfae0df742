"""Small pieces every model family shares: the load error and dtype names (atomic writes: `ot_gradio.fsutil`)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ot_gradio.config.enums import DataType


class ModelLoadError(RuntimeError):
    """A base model could not be loaded; the message says which value was wrong and what to do."""


_DTYPES = {
    DataType.FLOAT_32: torch.float32,
    DataType.FLOAT_16: torch.float16,
    DataType.BFLOAT_16: torch.bfloat16,
}


def torch_dtype(dtype: DataType | str | torch.dtype | None, default: torch.dtype = torch.float32) -> torch.dtype:
    """The torch dtype for a saved or loaded weight; NONE and None mean `default`."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype):
        return dtype
    dtype = DataType(dtype)
    if dtype == DataType.NONE:
        return default
    if dtype not in _DTYPES:
        raise ValueError(f"Weights cannot be stored as {dtype}; use one of {', '.join(d.value for d in _DTYPES)}.")
    return _DTYPES[dtype]


def cast_state_dict(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """Float tensors cast to `dtype` (copies, so the live model keeps its own dtype); others untouched."""
    out = {}
    for key, value in state_dict.items():
        value = value.detach()
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        out[key] = value.cpu().contiguous()
    return out
