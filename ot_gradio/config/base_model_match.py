"""Does the base model look like the chosen model type? A cheap, torch-free look, for the page to
say so while the user edits (loading the model to find out takes minutes): a local diffusers
folder names its pipeline in model_index.json (a modular one: modular_model_index.json) (`_class_name`); a single file, a hub id or a
`tiny:` model is judged by its name. Only a clear sign of another family is reported: a name
that says nothing (model.safetensors, my-finetune) passes, and SD 1.5 and SD 2.x share one
pipeline, so they are not told apart. The signs are in the families' descriptions (config/family_info)."""

from __future__ import annotations

from pathlib import Path

from .. import jsontext
from .enums import ModelType as M
from .families import SIGNS
from .family_info import Sign


def _by_class(name: str) -> Sign | None:
    """The sign with the longest pipeline-class prefix of `name` ("StableDiffusionXL" over "StableDiffusion");
    signs whose prefixes tie (Wan 2.1 I2V and Wan 2.2 I2V A14B: one pipeline class) as one sign of all their types."""
    found = [(len(p), sign) for sign in SIGNS for p in sign.class_prefixes if name.startswith(p)]
    if not found:
        return None
    longest = max(length for length, _ in found)
    tied = [sign for length, sign in found if length == longest]
    if len(tied) == 1:
        return tied[0]
    return Sign(" or ".join(s.name for s in tied), tuple(m for s in tied for m in s.model_types), (), ())


def family_by_name(name: str) -> Sign | None:
    """The family a file or hub name names (a path: its file name), or None."""
    return _by_name(Path(name).name or name)


def _by_name(name: str) -> Sign | None:
    """The sign with the longest word in `name` ("flux2" over "flux"); between words as long, the
    one met first in the name."""
    low = name.lower()
    found = [(len(w), -low.index(w), sign.name, sign) for sign in SIGNS for w in sign.name_words if w in low]
    return max(found, key=lambda f: f[:3])[3] if found else None


def _pipeline_class(folder: Path) -> tuple[str, str] | None:
    """The folder's index file and the pipeline class it names: model_index.json, else a modular
    pipeline's (Anima) modular_model_index.json."""
    for index in (folder / "model_index.json", folder / "modular_model_index.json"):
        try:
            if not index.is_file() or index.stat().st_size > 1_000_000:
                continue
            value = jsontext.loads(index.read_text(encoding="utf-8")).get("_class_name")
        except (OSError, ValueError, AttributeError):
            return None
        return (index.name, value) if isinstance(value, str) else None
    return None


def base_model_mismatch(model_type: str | None, base_model: str | None) -> str | None:
    """A one-line warning when `base_model` is clearly of another family than `model_type`."""
    try:
        chosen = M(str(model_type))
    except ValueError:
        return None
    name = str(base_model or "").strip()
    if not name or "\0" in name or len(name) > 4096:
        return None
    how, kind = "its name", None
    try:
        path = Path(name).expanduser()
        folder = path.is_dir()
    except (OSError, ValueError):
        folder = False
    if folder:
        found = _pipeline_class(path)
        if found is None:
            return None  # not a diffusers folder: the pre-run check says so
        index, cls = found
        how, kind = f"{index} names {cls}", _by_class(cls)
    else:
        kind = _by_name(name.removeprefix("tiny:") if name.startswith("tiny:") else Path(name).name or name)
    if kind is None or chosen in kind.model_types:
        return None
    return (f"Base model: '{name[:200]}' looks like {kind.name} ({how}), but the model type is {chosen.value}; "
            f"choose the model type of that model ({', '.join(m.value for m in kind.model_types)}) or a base model of type {chosen.value}.")

