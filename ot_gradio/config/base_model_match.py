"""Does the base model look like the chosen model type? A cheap, torch-free look, for the page to
say so while the user edits (loading the model to find out takes minutes): a local diffusers
folder names its pipeline in model_index.json (`_class_name`); a single file, a hub id or a
`tiny:` model is judged by its name. Only a clear sign of another family is reported: a name
that says nothing (model.safetensors, my-finetune) passes, and SD 1.5 and SD 2.x share one
pipeline, so they are not told apart."""

from __future__ import annotations

import json
from pathlib import Path

from .enums import ModelType as M

_SD = (M.STABLE_DIFFUSION_15, M.STABLE_DIFFUSION_15_INPAINTING, M.STABLE_DIFFUSION_20, M.STABLE_DIFFUSION_20_BASE,
       M.STABLE_DIFFUSION_20_INPAINTING, M.STABLE_DIFFUSION_21, M.STABLE_DIFFUSION_21_BASE)
# (family as people call it, its model types, pipeline class-name prefixes, words in a file or hub name),
# the more specific first ("StableDiffusionXL" before "StableDiffusion", "flux2" before "flux")
KINDS: tuple[tuple[str, tuple[M, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    ("Stable Diffusion XL", (M.STABLE_DIFFUSION_XL_10_BASE, M.STABLE_DIFFUSION_XL_10_BASE_INPAINTING),
     ("StableDiffusionXL",), ("sdxl", "sd_xl", "stable-diffusion-xl")),
    ("Stable Diffusion 3", (M.STABLE_DIFFUSION_3, M.STABLE_DIFFUSION_35), ("StableDiffusion3",),
     ("sd3", "sd3.5", "sd35", "stable-diffusion-3")),
    ("Stable Diffusion 1.x/2.x", _SD, ("StableDiffusionPipeline", "StableDiffusionInpaintPipeline"),
     ("sd15", "sd2", "sd-v1", "sd_v1", "v1-5", "stable-diffusion-v1", "stable-diffusion-2", "stable-diffusion-inpainting")),
    ("Flux.2", (M.FLUX_2,), ("Flux2",), ("flux2", "flux.2", "flux-2")),
    ("Chroma", (M.CHROMA_1,), ("Chroma",), ("chroma",)),
    ("Flux.1", (M.FLUX_DEV_1, M.FLUX_FILL_DEV_1), ("Flux",), ("flux",)),
    ("PixArt", (M.PIXART_ALPHA, M.PIXART_SIGMA), ("PixArt",), ("pixart",)),
    ("Sana", (M.SANA,), ("Sana",), ("sana",)),
    ("Qwen-Image", (M.QWEN,), ("QwenImage",), ("qwen-image", "qwen_image", "qwenimage")),
    ("Z-Image", (M.Z_IMAGE,), ("ZImage",), ("z-image", "z_image", "zimage")),
    ("Stable Cascade", (M.STABLE_CASCADE_1,), ("StableCascade",), ("cascade",)),
    ("Würstchen", (M.WUERSTCHEN_2,), ("Wuerstchen",), ("wuerstchen",)),
)


def _by_class(name: str):
    return next((k for k in KINDS if any(name.startswith(p) for p in k[2])), None)


def _by_name(name: str):
    low = name.lower()
    return next((k for k in KINDS if any(w in low for w in k[3])), None)


def _pipeline_class(folder: Path) -> str | None:
    try:
        if not (folder / "model_index.json").is_file() or (folder / "model_index.json").stat().st_size > 1_000_000:
            return None
        value = json.loads((folder / "model_index.json").read_text(encoding="utf-8")).get("_class_name")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


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
        cls = _pipeline_class(path)
        if cls is None:
            return None  # not a diffusers folder: the pre-run check says so
        how, kind = f"model_index.json names {cls}", _by_class(cls)
    else:
        kind = _by_name(name.removeprefix("tiny:") if name.startswith("tiny:") else Path(name).name or name)
    if kind is None or chosen in kind[1]:
        return None
    return (f"Base model: '{name[:200]}' looks like {kind[0]} ({how}), but the model type is {chosen.value}; "
            f"choose the model type of that model ({', '.join(m.value for m in kind[1])}) or a {chosen.value} base model.")
