"""SVDQuant (OneTrainer's `quantization.svd_dtype`, `svd_rank`, `cache_dir`): a quantized Linear
layer keeps the largest singular directions of its weight unquantized.

W (float32) = U S Vh; with rank r, `down` = Vh[:r] (r, in) and `up` = U[:, :r] * S[:r] (out, r), both
in the svd data type; the layer quantizes W - up @ down, whose range is smaller, and computes
quantized(x) + (x @ down.T) @ up.T. The factors are frozen buffers of the layer (`svd_up`,
`svd_down`, not saved in its state dict) and a forward hook adds their term, so the hook works
the same under every quantized layer type and under the adapters that call it (peft's LoRA, DoRA,
LoHa / LoKr, OFT). Whatever reads a quantized layer's full weight adds `low_rank_weight`.

The SVD of a large weight takes seconds on a CPU; it runs on the train device when that is a GPU.
With a cache folder the factors (up to rank 128, or the run's rank if larger) are kept as
.safetensors files keyed by a SHA-256 of the weight's float32 values, so the next run skips them.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..config.enums import DataType
from ..config.svd_quant import SVD_DTYPES, svd_problems
from ..fsutil import replace_write_bytes

log = logging.getLogger(__name__)

TORCH_DTYPES = dict(zip(SVD_DTYPES, (torch.float32, torch.float16, torch.bfloat16), strict=True))
CACHE_RANK = 128  # OneTrainer's: a cached SVD serves every later rank up to this


@dataclass(frozen=True)
class SvdSpec:
    dtype: torch.dtype
    rank: int
    cache_dir: Path | None = None


def svd_spec(config: Any) -> SvdSpec | None:
    """The run's SVDQuant setting (None: off). ValueError naming quantization.svd_dtype for a type
    the factors cannot be stored in."""
    q = config.quantization
    data_type = DataType(q.svd_dtype)
    if data_type == DataType.NONE:
        return None
    if data_type not in TORCH_DTYPES:
        raise ValueError(svd_problems(config)[0])
    folder = str(q.cache_dir or "").strip()
    return SvdSpec(TORCH_DTYPES[data_type], int(q.svd_rank), Path(folder).expanduser() if folder else None)


def weight_key(weight: torch.Tensor) -> str:
    """The cache's name for a weight: its shape and a SHA-256 of its float32 values."""
    values = weight.detach().to(device="cpu", dtype=torch.float32).contiguous()
    h = hashlib.sha256(str(tuple(values.shape)).encode())
    h.update(values.numpy())
    return h.hexdigest()


def _read_cache(path: Path, rank: int, shape: torch.Size) -> tuple[torch.Tensor, ...] | None:
    """(U, S, Vh) from a cache file that holds at least `rank` directions of a weight of `shape`;
    None when it is missing, unreadable (e.g. cut short) or smaller."""
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
        u, s, vh = tensors["U"], tensors["S"], tensors["Vh"]
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 (a damaged cache file is computed again)
        log.warning("quantization.cache_dir: cannot read %s (%s); computing its SVD again", path, exc)
        return None
    ok = u.shape[0] == shape[0] and vh.shape[1] == shape[1] and u.shape[1] == s.shape[0] == vh.shape[0] >= rank
    return (u, s, vh) if ok else None


def _decompose(weight: torch.Tensor, rank: int, cache_dir: Path | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first `rank` (at least) singular triplets of `weight` (float32), from the cache when it has them."""
    path = cache_dir / f"{weight_key(weight)}.safetensors" if cache_dir is not None else None
    if path is not None:
        cached = _read_cache(path, rank, weight.shape)
        if cached is not None:
            return tuple(t.to(weight.device) for t in cached)
    u, s, vh = torch.linalg.svd(weight, full_matrices=False)  # (svd_lowrank leaves far more error, OneTrainer found)
    if path is not None:
        from safetensors.torch import save

        keep = max(rank, CACHE_RANK)
        tensors = {"U": u[:, :keep], "S": s[:keep], "Vh": vh[:keep]}
        replace_write_bytes(path, save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}))
    return u, s, vh


def split_low_rank(layer: nn.Linear, spec: SvdSpec, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Take the low-rank part out of `layer`'s plain weight (in place: it becomes W - up @ down, to be
    quantized next) and return (up, down) in the svd data type, on the weight's device. On the meta
    device (the memory planner) only their shapes."""
    weight = layer.weight
    rank = min(spec.rank, *weight.shape)
    if weight.is_meta:
        meta = torch.device("meta")
        return torch.empty(weight.shape[0], rank, dtype=spec.dtype, device=meta), torch.empty(rank, weight.shape[1], dtype=spec.dtype, device=meta)
    work = device if device.type == "cuda" else weight.device
    with torch.no_grad():
        w = weight.detach().to(device=work, dtype=torch.float32)
        u, s, vh = _decompose(w, rank, spec.cache_dir)
        down = vh[:rank].to(spec.dtype).contiguous()
        up = (u[:, :rank] * s[:rank]).to(spec.dtype).contiguous()
        weight.data = (w - up.float() @ down.float()).to(device=weight.device, dtype=weight.dtype)
    return up.to(weight.device), down.to(weight.device)


def _add_low_rank(layer: nn.Module, args: tuple, kwargs: dict, output: torch.Tensor) -> torch.Tensor:
    x = args[0] if args else next(iter(kwargs.values()))
    dtype = output.dtype
    return output + F.linear(F.linear(x.to(dtype), layer.svd_down.to(dtype)), layer.svd_up.to(dtype))


def attach_low_rank(layer: nn.Module, up: torch.Tensor, down: torch.Tensor) -> None:
    """Give a quantized layer its frozen factors and the hook that adds their term to its output."""
    layer.register_buffer("svd_up", up.detach(), persistent=False)
    layer.register_buffer("svd_down", down.detach(), persistent=False)
    layer.register_forward_hook(_add_low_rank, with_kwargs=True)


def low_rank_weight(layer: nn.Module) -> torch.Tensor | None:
    """up @ down (out, in) in float32 for a layer with SVDQuant factors, else None: what a reader of
    the layer's full weight adds to its dequantized weight."""
    up, down = getattr(layer, "svd_up", None), getattr(layer, "svd_down", None)
    if not isinstance(up, torch.Tensor) or not isinstance(down, torch.Tensor):
        return None
    return up.float() @ down.float()
