"""`fallback_train_dtype`, as OneTrainer's: the parts that overflow in float16 (T5 and the LLM text
encoders, HiDream's and HunyuanVideo's transformers, Stable Cascade's prior: each family's
`fp16_unstable`) run at the fallback type while the run trains in float16.

- BFLOAT_16 (the default): such a part runs under a bfloat16 autocast instead of the float16 one.
- FLOAT_32: it runs with autocast off, so in its weights' own type (a quantized part's other
  weights and compute in float32, see `load_dtype`).

A quantized fp16-unstable part also loads its unquantized weights (norms, embeddings) in the
fallback type, as OneTrainer's loaders do. Training in any other type leaves these parts alone.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..config.enums import DataType

FALLBACK_DTYPES = {DataType.BFLOAT_16: torch.bfloat16, DataType.FLOAT_32: torch.float32}
_DEVICE_TYPES = ("cuda", "cpu", "xpu", "mps")


def fallback_dtype(data_type: DataType | str) -> torch.dtype:
    data_type = DataType(data_type)
    if data_type not in FALLBACK_DTYPES:
        raise ValueError(f"fallback_train_dtype: {data_type.value} is not a fallback type; use BFLOAT_16 or FLOAT_32")
    return FALLBACK_DTYPES[data_type]


def load_dtype(part: str, family: Any, compute: torch.dtype | None, fallback: DataType | str) -> torch.dtype | None:
    """The compute type a quantized `part` loads its other weights in: the fallback type for an
    fp16-unstable part when the run computes in float16, else `compute`."""
    if compute == torch.float16 and part in getattr(family, "fp16_unstable", ()):
        return fallback_dtype(fallback)
    return compute


def part_load_dtypes(config: Any, family: Any, parts: Any, device: torch.device, compute: torch.dtype | None) -> dict[str, torch.dtype]:
    """{part: the torch type it loads in} for a run of `config` computing in `compute` (device.weight_dtype,
    with the fallback type as an fp16-unstable quantized part's compute type)."""
    from .device import weight_dtype

    return {part: weight_dtype(getattr(config, part).weight_dtype, device,
                               load_dtype(part, family, compute, config.fallback_train_dtype)) for part in parts}


def fallback_autocast(fallback: torch.dtype):
    """The context an fp16-unstable part runs in: the fallback type in place of an active float16 autocast."""
    for kind in _DEVICE_TYPES:
        if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == torch.float16:
            if fallback == torch.float32:
                return torch.autocast(kind, enabled=False)
            # no cast cache: it is keyed by tensor, not type, and may hold a float16 copy from the outer autocast
            return torch.autocast(kind, dtype=fallback, cache_enabled=False)
    return contextlib.nullcontext()


def install_fp16_fallback(model: Any, fallback: DataType | str) -> list[str]:
    """Run each of `model`'s fp16-unstable parts at `fallback` under a float16 autocast (its forward
    wrapped, whatever forward it had); returns the parts it applies to. Called again, it only
    changes the type."""
    from ..models.common import base_module

    dtype = fallback_dtype(fallback)
    done = []
    for part in getattr(model, "fp16_unstable", ()):
        module = getattr(model, part, None)
        if module is None:
            continue
        module = base_module(module)
        if not hasattr(module, "_fp16_fallback"):
            original = module.forward

            def forward(*args: Any, _module: torch.nn.Module = module, _original: Any = original, **kwargs: Any) -> Any:
                with fallback_autocast(_module._fp16_fallback):
                    return _original(*args, **kwargs)

            module.forward = forward
        module._fp16_fallback = dtype
        done.append(part)
    return done
