"""Small pieces every model family shares: the load error, dtype names and atomic writes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

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


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync directories
        pass
    finally:
        os.close(fd)


def atomic_write_file(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call `write(temp_path)` for a temp file next to `path`, fsync it, then rename it over `path`.

    A crash mid-write leaves only a hidden temp file, never a file that looks complete.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        _fsync_path(tmp)
        os.replace(tmp, path)
        _fsync_path(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_dir(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call `write(temp_dir)` for a temp folder next to `path`, fsync its files, then swap it in.

    An existing folder is moved aside first and removed only after the new one is in place.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old = None
    try:
        write(tmp)
        for file in tmp.rglob("*"):
            if file.is_file():
                _fsync_path(file)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(tmp, path)
        _fsync_path(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not path.exists():
            os.replace(old / path.name, path)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return path
