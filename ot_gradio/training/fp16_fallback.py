"""`fallback_train_dtype`, as OneTrainer's: the parts that overflow in float16 (T5 and the LLM text
encoders, HiDream's and HunyuanVideo's transformers, Stable Cascade's prior: each family's
`fp16_unstable`) run at the fallback type while the run trains in float16.

- BFLOAT_16 (the default): such a part runs under a bfloat16 autocast instead of the float16 one.
- FLOAT_32: on CUDA it runs under a float32 autocast (OneTrainer's: half-precision weights cast
  up op by op); on the other backends, which have no float32 autocast, with autocast off, so in
  its weights' own type (float32 on a CPU; a quantized part's other weights and compute in
  float32, see `load_dtype`).

Float16 tensors that enter such a part come in at the fallback type, and when it is the family's
only text encoder the family's whole `encode_text` runs at it (`install_fp16_fallback`).

A quantized fp16-unstable part also loads its unquantized weights (norms, embeddings) in the
fallback type, as OneTrainer's loaders do. Training in any other type leaves these parts alone.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch

from ..config.enums import DataType
from .preflight import TrainingError

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


def _float16_autocast() -> str | None:
    """The device type whose float16 autocast is active (None: none is)."""
    for kind in _DEVICE_TYPES:
        if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == torch.float16:
            return kind
    return None


_UNSET = object()


def fallback_autocast(fallback: torch.dtype, kind: Any = _UNSET):
    """The context an fp16-unstable part runs in: the fallback type in place of an active float16
    autocast (`kind`: its device type, None for none; looked up when not given). FLOAT_32 is an
    autocast to float32 on CUDA, as OneTrainer's (half-precision weights are cast up op by op); the
    other backends have no float32 autocast, so there it turns autocast off (a CPU loads every part
    in float32)."""
    kind = _float16_autocast() if kind is _UNSET else kind
    if kind is None:
        return contextlib.nullcontext()
    if fallback == torch.float32 and kind != "cuda":
        return torch.autocast(kind, enabled=False)
    # no cast cache: it is keyed by tensor, not type, and may hold a float16 copy from the outer autocast
    return torch.autocast(kind, dtype=fallback, cache_enabled=False)


def _float16_at(fallback: torch.dtype, value: Any) -> Any:
    """`value` with its float16 tensors (in lists, tuples and dicts too) in `fallback`."""
    from ..models.common import map_tensors

    # (not on meta: the memory probe gives every weight the run's one type)
    return map_tensors(value, lambda t: t.to(fallback) if t.dtype == torch.float16 and t.device.type != "meta" else t)


def _inputs_at(fallback: torch.dtype, kind: str | None, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`args` and `kwargs` with their float16 tensors in `fallback` when the fallback region is an
    autocast (not where it turns autocast off; `kind`: the float16 autocast's device type): autocast
    refuses to concatenate or stack float16 tensors in a bfloat16 region (a float16 run's latents
    and timesteps entering Stable Cascade's prior)."""
    if kind is None or (fallback == torch.float32 and kind != "cuda"):
        return args, kwargs
    return _float16_at(fallback, args), _float16_at(fallback, kwargs)


def _at_fallback(function: Any, owner: Any) -> Any:
    """`function` run at `owner._fp16_fallback` (read at each call) under a float16 autocast."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        fallback, kind = owner._fp16_fallback, _float16_autocast()
        args, kwargs = _inputs_at(fallback, kind, args, kwargs)
        with fallback_autocast(fallback, kind):
            return function(*args, **kwargs)

    return run


def install_fp16_fallback(model: Any, fallback: DataType | str) -> list[str]:
    """Run each of `model`'s fp16-unstable parts at `fallback` under a float16 autocast (its forward
    wrapped, whatever forward it had; float16 inputs come in at the fallback type). When every
    text encoder of the family is one of them (its T5 or LLM alone), the family's whole
    `encode_text` runs so too, as OneTrainer's text encoding runs in that encoder's autocast
    context: the encoder's bfloat16 hidden states are stacked, concatenated and masked there,
    which a float16 autocast refuses. (Flux, SD 3 and HiDream keep their CLIP encoders in the
    run's float16.) A VAE's `encode` and `decode` run at the fallback type too (SDXL's and Sana's
    VAE, which a run without latent caching calls inside the step). Returns the parts it applies
    to. Called again, it only changes the type."""
    from ..models.common import base_module

    dtype = fallback_dtype(fallback)
    done = []
    for part in getattr(model, "fp16_unstable", ()):
        module = getattr(model, part, None)
        if module is None:
            continue
        module = base_module(module)
        if not hasattr(module, "_fp16_fallback"):
            for name in ("forward", "encode", "decode") if part == "vae" else ("forward",):
                setattr(module, name, _at_fallback(getattr(module, name), module))
        module._fp16_fallback = dtype
        done.append(part)
    text_encoders = set(getattr(model, "text_encoder_names", ()))
    if text_encoders and text_encoders <= set(done) and hasattr(model, "encode_text"):
        if not hasattr(model, "_fp16_fallback"):
            model.encode_text = _at_fallback(model.encode_text, model)
        model._fp16_fallback = dtype
    return done


_MIXED = "at::autocast::prioritize"  # torch's words when a float16 autocast meets a bfloat16 tensor in a cat / stack


def mixed_half_types(exc: BaseException, config: Any, family: Any) -> TrainingError | None:
    """What to tell the user when a float16 run's step fails mixing bfloat16 into float16 (`exc`
    says so; None otherwise): the parts that load in BFLOAT_16 outside the fallback. Some models
    use their weights outside autocast (diffusers' RMS norms cast their input to the weight's
    type), and a float16 autocast refuses to concatenate the bfloat16 tensors that makes
    (Qwen-Image's, Anima's and Ideogram 4's transformers, stored in BFLOAT_16 in a FLOAT_16 run)."""
    if _MIXED not in str(exc) or DataType(config.train_dtype) != DataType.FLOAT_16:
        return None
    unstable = set(getattr(family, "fp16_unstable", ()))
    parts = [p for p in family.parts if p not in unstable and DataType(getattr(config, p).weight_dtype) == DataType.BFLOAT_16]
    if not parts:
        return None
    fields = ", ".join(f"{p}.weight_dtype" for p in parts)
    return TrainingError(f"train_dtype FLOAT_16 with {fields} BFLOAT_16: this model mixes those bfloat16 weights into its "
                      f"float16 computation, which float16 autocast refuses. Set {fields} to FLOAT_16, or train_dtype to "
                      "BFLOAT_16 (a card without bfloat16: FLOAT_16 for both).")
