"""The weights variant a local diffusers folder must be loaded with.

A hub repo often holds each part's weights twice: `diffusion_pytorch_model.safetensors` and a
half-precision copy `diffusion_pytorch_model.fp16.safetensors` (transformers: `model.fp16.safetensors`;
sharded: `...fp16-00001-of-00002.safetensors` with `...safetensors.index.fp16.json`, or in the
older naming `...-00001-of-00002.fp16.safetensors` with `...safetensors.fp16.index.json`). A folder
downloaded with only the copies (the usual way to save half the disk and download time) loads in diffusers and transformers only when the variant is
named: without it they look for the plain file and fail; a hub repo that ships only the copies
fails the same way. The loaders name it where a part has no plain weights (a hub repo's from its
file list, or offline from its cached snapshot); diffusers then takes the plain weights of the
parts that have no copy.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from ot_gradio.models.common import ModelLoadError

from .. import jsontext

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


def _variant_of(names: Iterable[str], where: object) -> str | None:
    """The variant of one part's weights files `names` when it has variant weights and no plain
    ones; None when it has plain weights or none (a tokenizer, a scheduler)."""
    plain, variants = False, set()
    for name in names:
        match = next((m for pattern in _NAMES if (m := pattern.match(name))), None)
        if match is None:
            continue
        if match["variant"]:
            variants.add(match["variant"])
        else:
            plain = True
    if plain or not variants:
        return None
    if len(variants) > 1:
        raise ModelLoadError(f"{where} holds the weights variants {', '.join(sorted(variants))} and no plain weights; "
                             "keep one variant (e.g. the .fp16. files) in the folder.")
    return variants.pop()


def _parts_variant(files: Mapping[str, Iterable[str]], where: object) -> str | None:
    """The variant for a pipeline whose parts hold `files` (part -> its file names): the one its
    parts without plain weights hold, None when every part has plain weights."""
    needed = {part: variant for part in sorted(files) if part not in NOT_LOADED
              and (variant := _variant_of(files[part], f"{where}/{part}")) is not None}
    if len(set(needed.values())) > 1:
        found = ", ".join(f"{part}: {variant}" for part, variant in needed.items())
        raise ModelLoadError(f"The parts of {where} hold only weights of different variants ({found}); diffusers loads "
                             "one variant for every part: keep the same one (or the plain weights) in each part's folder.")
    return next(iter(needed.values()), None)


def part_variant(folder: str | Path) -> str | None:
    """The variant of the one part in the local `folder` (`_variant_of`)."""
    folder = Path(folder)
    return _variant_of([f.name for f in folder.iterdir()] if folder.is_dir() else [], folder)


def folder_variant(folder: str | Path) -> str | None:
    """The variant to load the local diffusers folder `folder` with (`_parts_variant`). The parts
    are the subfolders its model_index.json lists (every subfolder where it cannot be read)."""
    folder = Path(folder)
    try:
        index = jsontext.loads((folder / "model_index.json").read_text(encoding="utf-8"))
        parts = [k for k, v in index.items() if isinstance(v, list) and v and v[0] is not None]
    except (OSError, ValueError, AttributeError):
        parts = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    return _parts_variant({part: [f.name for f in (folder / part).iterdir()] for part in parts
                           if (folder / part).is_dir()}, folder)


@functools.lru_cache(maxsize=32)
def _repo_files(repo: str, token: str | None) -> tuple[str, ...]:
    """The file names of the hub repo (asked once a process: Stable Cascade asks for each part)."""
    from huggingface_hub import list_repo_files

    return tuple(list_repo_files(repo, token=token))


def hub_variant(repo: str, part: str | None = None, *, cache_dir: str | None = None, token: str | None = None,
                offline: bool = False) -> dict[str, str]:
    """from_pretrained's {"variant": name} for the hub repo `repo`: for its subfolder `part` ("":
    the repo's top level as one part), or None for the whole pipeline. Read from the repo's file
    list (one request; offline: its cached snapshot); {} when its plain weights load, or when the
    list cannot be had (diffusers then says why the load fails)."""
    part = None if part is None else part.strip("/")
    if offline:
        from huggingface_hub import snapshot_download

        try:
            return local_variant(snapshot_download(repo, cache_dir=cache_dir, local_files_only=True), part)
        except ModelLoadError:
            raise
        except Exception:  # not cached: diffusers names it
            return {}
    try:
        names = _repo_files(repo, token)
    except Exception:  # no network, a gated repo without access, a wrong id: diffusers says which
        return {}
    files: dict[str, list[str]] = {}
    for name in names:
        folder, _, file = name.rpartition("/")
        files.setdefault(folder, []).append(file)
    if part is None:
        variant = _parts_variant({folder: found for folder, found in files.items() if folder and "/" not in folder}, repo)
    else:
        variant = _variant_of(files.get(part, []), f"{repo}/{part}" if part else repo)
    return {"variant": variant} if variant else {}


def variant_keywords(folder: str | Path, *, part: bool = False) -> dict[str, str]:
    """{"variant": name} to pass to from_pretrained for the local folder (a pipeline folder, or
    with `part` one part's folder), {} when its plain weights load."""
    variant = part_variant(folder) if part else folder_variant(folder)
    return {"variant": variant} if variant else {}


def local_variant(source: str | Path, part: str | None = None) -> dict[str, str]:
    """`variant_keywords` of `source` (its subfolder `part`, "" for its top level as one part, or
    None for the whole pipeline folder) when it is a local folder; {} for a hub id."""
    if not Path(source).is_dir():
        return {}
    return variant_keywords(source) if part is None else variant_keywords(Path(source) / part, part=True)


def part_keywords(source: str | Path, part: str, hub: Mapping) -> dict[str, str]:
    """from_pretrained's `variant` for the part `part` ("": the top level) of `source`, a local
    folder or a hub repo (`hub`: the loading keywords cache_dir, token, local_files_only), for
    loaders that load the parts one by one."""
    if Path(source).is_dir():
        return local_variant(source, part)
    return hub_variant(str(source), part, cache_dir=hub.get("cache_dir"), token=hub.get("token"),
                       offline=bool(hub.get("local_files_only")))
