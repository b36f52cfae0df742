"""SVDQuant settings (OneTrainer's `quantization.svd_dtype`, `svd_rank`, `cache_dir`): what a run
cannot start with is refused before the model loads; a setting that will do nothing is said.
The correction itself is training/svd_quant.py."""

from __future__ import annotations

from typing import Any

from .enums import GGUF_TYPES, QUANTIZED_TYPES, DataType
from .families import family_info
from .include_parts import excluded_parts

SVD_DTYPES = (DataType.FLOAT_32, DataType.FLOAT_16, DataType.BFLOAT_16)  # what the factors can be stored in


def svd_on(config: Any) -> bool:
    return DataType(config.quantization.svd_dtype) != DataType.NONE


def _parts(config: Any) -> list[str]:
    """The parts the run loads (a part left out, include off, has no weights to correct)."""
    info = family_info(config.model_type)
    names = [*info.parts, *info.extra_params] if info is not None else []  # (Ideogram 4's unconditional transformer)
    return [p for p in names if hasattr(getattr(config, p, None), "weight_dtype") and p not in excluded_parts(config)]


def svd_problems(config: Any) -> list[str]:
    """One line per SVDQuant setting the run cannot start with, naming the field to change."""
    if not svd_on(config):
        return []
    data_type = DataType(config.quantization.svd_dtype)
    if data_type not in SVD_DTYPES:
        return [f"quantization.svd_dtype: the low-rank factors are stored in FLOAT_32, FLOAT_16 or BFLOAT_16, not "
                f"{data_type.value}; choose one of those, or NONE to turn SVDQuant off."]
    gguf = [p for p in _parts(config) if DataType(getattr(config, p).weight_dtype) in GGUF_TYPES]
    return [f"quantization.svd_dtype: {p}.weight_dtype is {DataType(getattr(config, p).weight_dtype).value}, whose weights come "
            "already quantized from the .gguf file, so there is no full weight to take the low-rank part from; set "
            "quantization.svd_dtype to NONE, or load a .safetensors model with FLOAT_8, INT_8 or NFLOAT_4." for p in gguf]


def svd_warnings(config: Any) -> list[str]:
    """SVDQuant on while no part of the model is quantized: it does nothing (the run goes on)."""
    if not svd_on(config) or any(DataType(getattr(config, p).weight_dtype) in QUANTIZED_TYPES for p in _parts(config)):
        return []
    if any(DataType(getattr(config, p).weight_dtype) in GGUF_TYPES for p in _parts(config)):
        return []  # refused in svd_problems
    return [f"quantization.svd_dtype: {DataType(config.quantization.svd_dtype).value} corrects quantized weights, and no part "
            "has a quantized weight type (FLOAT_8, INT_8, NFLOAT_4, INT_W8A8, FLOAT_W8A8), so it has no effect; set it to NONE "
            "or quantize a part."]
