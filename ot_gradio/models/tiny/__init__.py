"""Tiny random models for tests and the offline demo (`tiny:<name>` base models).

They have the real classes and layouts of each family at a fraction of the width, build in well
under a second, and are saved the way real models are (diffusers folder, single file), so the
tests go through the real loading code. Nothing is downloaded. One module per family here
registers its builders with `register_tiny`; the family modules only load them by name.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple


class TinyModelPaths(NamedTuple):
    diffusers_dir: Path
    single_file: Path


# "tiny:<name>" -> (version, builder(root folder) -> TinyModelPaths). Each module in this package
# registers its own with `register_tiny`; bump the version when a tiny model changes, so cached
# copies are rebuilt.
TINY_MODELS: dict[str, tuple[int, Callable[[Path], TinyModelPaths]]] = {}


def register_tiny(name: str, version: int = 1):
    def wrap(builder: Callable[[Path], TinyModelPaths]) -> Callable[[Path], TinyModelPaths]:
        TINY_MODELS[f"tiny:{name}"] = (version, builder)
        return builder

    return wrap


def save_tiny(root: str | os.PathLike, file_name: str, build: Callable[[], Any],
              write_single: Callable[[Path, Any], None] | None = None,
              finish_folder: Callable[[Path], None] | None = None, index_file: str = "model_index.json") -> TinyModelPaths:
    """Save the pipeline `build()` returns under `root` as a diffusers folder (then changed by
    `finish_folder(folder)`) and, with `write_single(path, pipe)`, as the single file `file_name`
    (without: the family loads only from folders). Each is written atomically, so one that exists
    is complete and reused (a cache). `index_file`: the folder's index (a modular pipeline's is
    modular_model_index.json)."""
    from ot_gradio.fsutil import atomic_write_dir

    root = Path(root)
    paths = TinyModelPaths(root / "diffusers", root / file_name)
    has_folder = (paths.diffusers_dir / index_file).is_file()
    has_single = write_single is None or paths.single_file.is_file()
    if has_folder and has_single:
        return paths
    pipe = build()
    if not has_folder:

        def write(tmp: Path) -> None:
            pipe.save_pretrained(str(tmp), safe_serialization=True)
            if finish_folder is not None:
                finish_folder(tmp)

        atomic_write_dir(paths.diffusers_dir, write)
    if not has_single:
        write_single(paths.single_file, pipe)
    return paths


def seeded_model(model_class: Callable[[Any], Any], config: Any, seed: int):
    """`model_class(config)` with its random weights drawn from `seed`."""
    import torch

    torch.manual_seed(seed)
    return model_class(config)


def bpe_merges(vocab: dict[str, int], pairs) -> list[tuple[str, str]]:
    """A tiny BPE tokenizer's merges of `pairs`, each merged token added to `vocab` (the next id)
    where it is not in it yet."""
    merges = []
    for a, b in pairs:
        merges.append((a, b))
        vocab.setdefault(a + b, len(vocab))
    return merges


def tiny_cache_dir() -> Path:
    """Where tiny models for the offline demo live: $OT_GRADIO_TINY_DIR, else the user's cache."""
    if os.environ.get("OT_GRADIO_TINY_DIR"):
        return Path(os.environ["OT_GRADIO_TINY_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "ot_gradio" / "tiny"


def is_tiny(name: str) -> bool:
    return str(name).startswith("tiny:")


def all_tiny_models() -> dict[str, tuple[int, Callable[[Path], TinyModelPaths]]]:
    """Every tiny model by name (`tiny:sd15` ...): imports each module of this package, which
    register theirs."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return TINY_MODELS


def resolve_tiny(name: str) -> TinyModelPaths:
    """The saved files of a tiny model named like `tiny:sd15`, built on first use."""
    if name not in TINY_MODELS:
        all_tiny_models()
    if name not in TINY_MODELS:
        raise ValueError(f"Unknown tiny model '{name}'; known: {', '.join(sorted(TINY_MODELS))}.")
    version, builder = TINY_MODELS[name]
    return builder(tiny_cache_dir() / f"{name.removeprefix('tiny:')}-v{version}")
