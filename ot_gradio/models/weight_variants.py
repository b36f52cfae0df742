"""The weights variant a local diffusers folder must be loaded with.

A hub repo often holds each part's weights twice: `diffusion_pytorch_model.safetensors` and a
half-precision copy `diffusion_pytorch_model.fp16.safetensors` (transformers: `model.fp16.safetensors`;
sharded: `...fp16-00001-of-00002.safetensors` with `...safetensors.index.fp16.json`, or in the
older naming `...-00001-of-00002.fp16.safetensors` with `...safetensors.fp16.index.json`). A folder
downloaded with only the copies (the usual way to save half the disk and download time) loads in diffusers and transformers only when the variant is
named: without it they look for the plain file and fail. The loaders name it where a part has
no plain weights; diffusers then takes the plain weights of the parts that have no copy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ot_gradio.models.common import ModelLoadError

_STEM = r"(?:diffusion_pytorch_model|model|pytorch_model)"
_SHARD = r"-\d{5}-of-\d{5}"
_NAMES = [re.compile(pattern) for pattern in (
    rf"^{_STEM}(?:\.(?P<variant>\w+))?(?:{_SHARD})?\.(?:safetensors|bin)$",  # model.fp16-00001-of-00002.safetensors
    rf"^{_STEM}{_SHARD}\.(?P<variant>\w+)\.(?:safetensors|bin)$",  # the older model-00001-of-00002.fp16.safetensors
    rf"^{_STEM}\.(?:safetensors|bin)\.index(?:\.(?P<variant>\w+))?\.json$",  # model.safetensors.index.fp16.json
    rf"^{_STEM}\.(?:safetensors|bin)\.(?P<variant>\w+)\.index\.json$",  # the older model.safetensors.fp16.index.json
)]
# parts a pipeline folder may list that the loaders never load (SD 1.x loads without its safety checker)
NOT_LOADED = frozenset({"safety_checker", "feature_extractor"})


def part_variant(folder: str | Path) -> str | None:
    """The variant (fp16, bf16, ...) of the one part in `folder` when it has variant weights and
    no plain ones; None when it has plain weights or none (a tokenizer, a scheduler)."""
    folder = Path(folder)
    plain, variants = False, set()
    for file in folder.iterdir() if folder.is_dir() else ():
        match = next((m for pattern in _NAMES if (m := pattern.match(file.name))), None)
        if match is None:
            continue
        if match["variant"]:
            variants.add(match["variant"])
        else:
            plain = True
    if plain or not variants:
        return None
    if len(variants) > 1:
        raise ModelLoadError(f"{folder} holds the weights variants {', '.join(sorted(variants))} and no plain weights; "
                             "keep one variant (e.g. the .fp16. files) in the folder.")
    return variants.pop()


def folder_variant(folder: str | Path) -> str | None:
    """The variant to load the diffusers folder `folder` with: the one its parts without plain
    weights hold (None: every part has plain weights). The parts are the subfolders its
    model_index.json lists (every subfolder where it cannot be read)."""
    folder = Path(folder)
    try:
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
        names = [k for k, v in index.items() if isinstance(v, list) and v and v[0] is not None]
    except (OSError, ValueError, AttributeError):
        names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    needed = {name: variant for name in sorted(names) if name not in NOT_LOADED
              and (variant := part_variant(folder / name)) is not None}
    if len(set(needed.values())) > 1:
        found = ", ".join(f"{name}: {variant}" for name, variant in needed.items())
        raise ModelLoadError(f"The parts of {folder} hold only weights of different variants ({found}); diffusers loads "
                             "one variant for every part: keep the same one (or the plain weights) in each part's folder.")
    return next(iter(needed.values()), None)


def variant_keywords(folder: str | Path, *, part: bool = False) -> dict[str, str]:
    """{"variant": name} to pass to from_pretrained for the local folder (a pipeline folder, or
    with `part` one part's folder), {} when its plain weights load."""
    variant = part_variant(folder) if part else folder_variant(folder)
    return {"variant": variant} if variant else {}


def local_variant(source: str | Path, part: str | None = None) -> dict[str, str]:
    """`variant_keywords` of `source` (its subfolder `part`, or the whole pipeline folder) when it
    is a local folder; {} for a hub id, whose files diffusers chooses."""
    if not Path(source).is_dir():
        return {}
    return variant_keywords(Path(source) / part, part=True) if part else variant_keywords(source)
