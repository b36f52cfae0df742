"""The memory planner's probe results, kept between runs in the config's cache folder.

The probe (memory_probe.measure_step) runs the training step on meta tensors: 0.7-2 s for the
demo model, more for large ones, at the start of every run with gradient checkpointing AUTO and at
every `validate`. Its result depends only on shapes and code, not on weight values: the model's
structure (each part's class and config, every parameter's and buffer's name, shape, dtype and
whether it trains, each module's class and attention processor, checkpointing on or off), the
settings of the run that reach the step (everything in the config except the fields marked
`in_step=False` in the schema: schedule, outputs, samples, backups, data paths...), the precision, the library
versions and our own code (size and time of every .py file of the step's packages: training,
models, data). A run whose key is in `memory-probe.json` reuses the peak instead of probing
again; anything else is measured."""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from ..config.fields import iter_fields
from ..config.schema import TrainConfig

FILE = "memory-probe.json"
KEEP = 64  # entries kept (the newest)
# the settings that do not reach the step: the schema's `in_step=False`
NOT_IN_STEP = frozenset(f.path for f in iter_fields(TrainConfig) if not f.in_step)
_CODE: str | None = None


def _code_version() -> str:
    """Our package's .py files (path, size, modification time) and the libraries' versions."""
    global _CODE
    if _CODE is None:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for path in sorted([*(root / "training").rglob("*.py"), *(root / "models").rglob("*.py"), *(root / "data").rglob("*.py")]):
            st = path.stat()
            h.update(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        for name in ("torch", "diffusers", "transformers", "peft"):
            try:
                h.update(f"{name}={metadata.version(name)}\n".encode())
            except metadata.PackageNotFoundError:
                h.update(f"{name}=none\n".encode())
        _CODE = h.hexdigest()
    return _CODE


def _model_structure(model: Any, checkpointing: dict[str, bool], h: Any) -> None:
    for name, part in sorted(model.parts.items()):
        base = part.get_base_model() if hasattr(part, "get_base_model") else part
        h.update(f"part {name} {type(part).__qualname__} ckpt={checkpointing.get(name)} config={getattr(base, 'config', None)!r}\n".encode())
        for mod_name, module in part.named_modules():
            processor = getattr(module, "processor", None)
            h.update(f"m {mod_name} {type(module).__qualname__} {type(processor).__qualname__ if processor is not None else ''}\n".encode())
        for kind, items in (("p", part.named_parameters()), ("b", part.named_buffers())):
            for t_name, t in items:
                h.update(f"{kind} {t_name} {tuple(t.shape)} {t.dtype} {t.requires_grad}\n".encode())


def _without_ids(value: Any) -> Any:
    """The settings without generated ids (an embedding's `uuid` is new at every load when not set)."""
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k != "uuid"}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def probe_key(model: Any, config: Any, precision: Any, trained_text_parts: frozenset[str], checkpointing: dict[str, bool]) -> str:
    from ..config.io import config_to_dict  # noqa: PLC0415
    from ..config.optimizer import fused_back_pass_on  # noqa: PLC0415

    settings = _without_ids({k: v for k, v in config_to_dict(config).items() if k not in NOT_IN_STEP})
    h = hashlib.sha256()
    h.update(_code_version().encode())
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    h.update(f"precision {getattr(precision, 'dtype', None)} {getattr(precision, 'device', None)} "
             f"{getattr(precision, 'autocast_cache', None)} text {sorted(trained_text_parts)}\n".encode())
    h.update(f"fused back pass {fused_back_pass_on(config)}\n".encode())  # (the optimizer is not in the step's settings)
    _model_structure(model, checkpointing, h)
    return h.hexdigest()


def _file(config: Any) -> Path | None:
    folder = str(getattr(config, "cache_dir", "") or "").strip()
    return Path(folder) / FILE if folder else None


def _read(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}


def cached_peak(config: Any, key: str) -> int | None:
    path = _file(config)
    return None if path is None else _read(path).get(key)


def store_peak(config: Any, key: str, peak: int) -> None:
    """Best effort: a cache folder that cannot be written only means the next run probes again."""
    path = _file(config)
    if path is None:
        return
    entries = _read(path)
    entries.pop(key, None)
    entries[key] = int(peak)
    entries = dict(list(entries.items())[-KEEP:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
