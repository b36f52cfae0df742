"""The file layout of both tensor caches (data/latent_cache.py, data/text_cache.py): one
`<key>.safetensors` per entry, the key 64 hex digits, in a folder named by its first two."""

from __future__ import annotations

import re
from pathlib import Path

KEY = re.compile(r"^[0-9a-f]{64}$")


def entry_path(cache_dir: Path, key: str) -> Path:
    """Where the entry `key` is kept under `cache_dir`; a string that is no key is a ValueError."""
    if not KEY.match(key):
        raise ValueError(f"not a cache key: {key!r}")
    return cache_dir / key[:2] / f"{key}.safetensors"


def is_temp(name: str) -> bool:
    """A temp file a crashed write left: `.<key>.safetensors.*.tmp` (the latent cache's older versions: `.tmp-*`)."""
    return name.startswith(".tmp-") or (name.startswith(".") and name.endswith(".tmp"))


def clear_entries(cache_dir: Path) -> int:
    """Delete the entries under `cache_dir` and the temp files crashed writes left (no other file);
    returns how many entries."""
    removed = 0
    if not cache_dir.is_dir():
        return 0
    for sub in cache_dir.iterdir():
        if not (sub.is_dir() and re.fullmatch(r"[0-9a-f]{2}", sub.name)):
            continue
        for file in sub.iterdir():
            entry = file.suffix == ".safetensors" and KEY.match(file.stem) is not None
            if entry or is_temp(file.name):
                file.unlink(missing_ok=True)
                removed += entry
    return removed
