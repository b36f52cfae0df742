"""Automatic masks for a folder of images, the way OneTrainer's mask tool makes them.

A masker turns an image into a score map (0..1, higher = "this is the thing"): ClipSeg from a
text prompt, the rembg u2net human model, or closeness to a colour. `postprocess` blurs the map
(smoothing), thresholds it and dilates it (expansion); `combine` merges it with the image's
existing mask by mode, with OneTrainer's arithmetic:

- replace / fill: ``alpha * new`` (fill only touches images without a mask)
- add: ``clip(old + alpha * new)``; subtract: ``clip(old - alpha * new)``, where a missing mask
  counts as all white (training without a mask uses every pixel)
- blend: ``(old + alpha * new) / (1 + alpha)``

With alpha 1 and any mode but blend the written mask is binary (0/255); other alphas give grey
masks, which training reads as partial weights. Masks are written atomically as
``<stem>-masklabel.png`` with the previous one kept as ``<stem>-masklabel.png.bak``.
Heavy libraries (torch, transformers, onnxruntime) are imported only inside the maskers.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..data.images import load_mask, mask_path_for
from ..data.scan import list_image_files
from ..data.video import still_image
from ..fsutil import atomic_write, atomic_write_bytes
from .automask_models import (  # noqa: F401 - the maskers, re-exported for the page and tests
    CLIPSEG_HUB_ID,
    MASKERS,
    U2NET_FILE,
    U2NET_URL,
    Predictor,
    load_clipseg,
    load_rembg_human,
    parse_colour,
    split_prompts,
)
from .jobs import Job, JobError

MODES = ("replace", "fill", "add", "subtract", "blend")
BACKUP_SUFFIX = ".bak"
PREVIEW_LIMIT = 4


def _box_mean(a: np.ndarray, radius: int, axis: int) -> np.ndarray:
    n = a.shape[axis]
    pad = [(0, 0)] * a.ndim
    pad[axis] = (radius + 1, radius)
    sums = np.cumsum(np.pad(a, pad, mode="edge"), axis=axis, dtype=np.float64)
    upper = np.take(sums, np.arange(2 * radius + 1, 2 * radius + 1 + n), axis=axis)
    lower = np.take(sums, np.arange(n), axis=axis)
    return ((upper - lower) / (2 * radius + 1)).astype(np.float32)


def _grow(a: np.ndarray, radius: int, axis: int) -> np.ndarray:
    n = a.shape[axis]
    pad = [(0, 0)] * a.ndim
    pad[axis] = (radius, radius)
    padded = np.pad(a, pad)
    out = np.zeros_like(a)
    for shift in range(2 * radius + 1):
        out |= np.take(padded, np.arange(shift, shift + n), axis=axis)
    return out


def postprocess(score: np.ndarray, threshold: float, smooth: int = 0, expand: int = 0) -> np.ndarray:
    """Blur by a box of radius `smooth` (drops specks, rounds edges), keep pixels above
    `threshold`, then grow the kept region by `expand` pixels in every direction (a square)."""
    score = np.asarray(score, dtype=np.float32)
    if smooth > 0:
        score = _box_mean(_box_mean(score, int(smooth), 0), int(smooth), 1)
    kept = score > threshold
    if expand > 0:
        kept = _grow(_grow(kept, int(expand), 0), int(expand), 1)
    return kept.astype(np.float32)


def combine(existing: np.ndarray | None, new: np.ndarray, mode: str, alpha: float = 1.0) -> np.ndarray:
    """Merge a new 0..1 map into an existing mask (or None) by mode; see the module docstring."""
    new = np.asarray(new, dtype=np.float32)
    if mode not in MODES:
        raise JobError(f"Mode: '{mode}' is not one of {', '.join(MODES)}")
    if mode in ("replace", "fill") or (existing is None and mode in ("add", "blend")):
        out = alpha * new
    elif mode == "subtract":
        out = (1.0 if existing is None else existing) - alpha * new
    elif mode == "add":
        out = existing + alpha * new
    else:
        out = (existing + alpha * new) / (1.0 + alpha)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def overlay(image: Image.Image, mask: Image.Image) -> Image.Image:
    """The image with the masked-out (black) part darkened and tinted red."""
    pixels = np.asarray(image.convert("RGB"), dtype=np.float32)
    keep = np.asarray(mask.convert("L").resize(image.size), dtype=np.float32)[..., None] / 255.0
    tint = np.array([200, 0, 40], dtype=np.float32)
    out = pixels * (0.3 + 0.7 * keep) + tint * 0.4 * (1.0 - keep)
    return Image.fromarray(np.clip(out, 0, 255).astype(np.uint8), "RGB")


# ---- the job ------------------------------------------------------------------------------

@dataclass
class MaskOptions:
    folder: Path
    model: str = "clipseg"
    model_path: str = ""
    prompt: str = ""
    colour: str = ""
    threshold: float = 0.3
    smoothing: int = 5
    expansion: int = 10
    alpha: float = 1.0
    mode: str = "fill"
    include_subfolders: bool = False
    invert: bool = False
    device: str = "auto"
    allow_download: bool = False

    @property
    def query(self) -> str:
        return getattr(self, MASKERS[self.model].query) if MASKERS[self.model].query else ""


def _number(params: dict[str, Any], key: str, label: str, kind: type, low: float, high: float, default: float) -> Any:
    raw = params.get(key, default)
    try:
        value = kind(default if raw in (None, "") else raw)
    except (TypeError, ValueError):
        raise JobError(f"{label}: '{raw}' is not a number") from None
    if not low <= value <= high:
        raise JobError(f"{label}: {value} is outside {low}..{high}")
    return value


def parse_options(params: dict[str, Any]) -> MaskOptions:
    """Check every field up front, so a bad value fails before a model is loaded."""
    folder = Path(str(params.get("folder") or "")).expanduser()
    if not str(params.get("folder") or "").strip() or not folder.is_dir():
        raise JobError(f"Folder: '{params.get('folder') or ''}' is not a folder")
    model = str(params.get("model") or "clipseg")
    if model not in MASKERS:
        raise JobError(f"Model: '{model}' is not one of {', '.join(MASKERS)}")
    mode = str(params.get("mode") or "fill")
    if mode not in MODES:
        raise JobError(f"Mode: '{mode}' is not one of {', '.join(MODES)}")
    opts = MaskOptions(
        folder=folder, model=model, mode=mode, model_path=str(params.get("model_path") or ""),
        prompt=str(params.get("prompt") or ""), colour=str(params.get("colour") or ""),
        threshold=_number(params, "threshold", "Threshold", float, 0.0, 1.0, 0.3),
        smoothing=_number(params, "smoothing", "Smoothing", int, 0, 256, 5),
        expansion=_number(params, "expansion", "Expansion", int, 0, 1024, 10),
        alpha=_number(params, "alpha", "Alpha", float, 0.0, 1.0, 1.0),
        include_subfolders=bool(params.get("include_subfolders")), invert=bool(params.get("invert")),
        device=str(params.get("device") or "auto"), allow_download=bool(params.get("allow_download")),
    )
    if model == "clipseg" and not split_prompts(opts.prompt):
        raise JobError("Prompt: ClipSeg needs a prompt (several things: separate them with commas)")
    if model == "colour":
        parse_colour(opts.colour)
    return opts


class Masking:
    """Makes masks for one options set; the model is loaded on first use (fill mode may need none)."""

    def __init__(self, opts: MaskOptions):
        self.opts = opts
        self.spec = MASKERS[opts.model]
        self._predictor: Predictor | None = None

    def predictor(self) -> Predictor:
        if self._predictor is None:
            self._predictor = self.spec.load(self.opts.model_path, self.opts.device, allow_download=self.opts.allow_download)
        return self._predictor

    def existing(self, image_path: Path, size: tuple[int, int]) -> np.ndarray | None:
        path = mask_path_for(image_path)
        if not path.is_file():
            return None
        mask = load_mask(path)
        if mask.size != size:
            mask = mask.resize(size, Image.BILINEAR)
        return np.asarray(mask, dtype=np.float32) / 255.0

    def make(self, image_path: Path) -> tuple[Image.Image, Image.Image | None]:
        """(image, new mask) or (image, None) when fill mode leaves an existing mask alone."""
        image = still_image(image_path)  # a clip: its first frame; the mask holds for each frame
        old = self.existing(image_path, image.size)
        if self.opts.mode == "fill" and old is not None:
            return image, None
        score = self.predictor().predict(image, self.opts.query)
        new = postprocess(score, self.spec.cut(self.opts.threshold), self.opts.smoothing, self.opts.expansion)
        if self.opts.invert:
            new = 1.0 - new
        mixed = combine(old, new, self.opts.mode, self.opts.alpha)
        return image, Image.fromarray(np.round(mixed * 255.0).astype(np.uint8), "L")


def write_mask(image_path: Path, mask: Image.Image) -> Path:
    """Atomically (re)write the image's mask, first keeping the old one as `<mask>.bak`."""
    path = mask_path_for(image_path)
    if path.is_file():
        atomic_write_bytes(path.with_name(path.name + BACKUP_SUFFIX), path.read_bytes())
    buffer = io.BytesIO()
    mask.save(buffer, format="PNG")
    return atomic_write_bytes(path, buffer.getvalue())


@dataclass
class PreviewItem:
    path: Path
    image: Image.Image
    mask: Image.Image
    overlay: Image.Image


def _images(opts: MaskOptions) -> list[Path]:
    files = list_image_files(opts.folder, opts.include_subfolders, clips=True)
    if not files:
        raise JobError(f"Folder: no images in {opts.folder}" + ("" if opts.include_subfolders else " (subfolders not included)"))
    return files


def preview(params: dict[str, Any], limit: int = PREVIEW_LIMIT) -> list[PreviewItem]:
    """The masks the job would write for the first `limit` images, written nowhere."""
    opts = parse_options(params)
    masking = Masking(opts)
    items = []
    for path in _images(opts)[:limit]:
        image, mask = masking.make(path)
        if mask is None:  # fill mode keeps the existing mask: show that one
            mask = load_mask(mask_path_for(path)).resize(image.size)
        items.append(PreviewItem(path, image, mask, overlay(image, mask)))
    return items


def _write_preview(params: dict[str, Any], job: Job) -> dict[str, Any]:
    out_dir = Path(str(params.get("preview_dir") or "")).expanduser()
    if not str(params.get("preview_dir") or "").strip():
        raise JobError("Preview folder: not set")
    folder = Path(str(params.get("folder") or "")).expanduser().resolve()
    if out_dir.resolve().is_relative_to(folder):
        raise JobError(f"Preview folder: {out_dir} is inside the dataset {folder}; previews are never written there")
    job.progress(0, 1, "preview")
    paths = []
    for index, item in enumerate(preview(params)):
        target = out_dir / f"{index:02d}-{item.path.stem}-overlay.png"
        atomic_write(target, lambda tmp, picture=item.overlay: picture.save(tmp, format="PNG"))
        paths.append(str(target))
    job.progress(1, 1, "preview")
    return {"preview": paths, "message": f"preview of {len(paths)} image(s); nothing written in the dataset"}


def run_job(params: dict[str, Any], job: Job) -> dict[str, Any]:
    """The "automask" job. With params["preview"] it writes overlays to params["preview_dir"]."""
    if params.get("preview"):
        return _write_preview(params, job)
    opts = parse_options(params)
    files = _images(opts)
    masking = Masking(opts)
    written, skipped, failed = 0, 0, []
    done = 0
    for done, path in enumerate(files):
        if job.cancelled():
            break
        name = path.relative_to(opts.folder).as_posix()
        job.progress(done, len(files), name)
        try:
            _, mask = masking.make(path)
        except JobError:
            raise
        except Exception as err:  # noqa: BLE001 - one bad image must not stop the folder
            failed.append(name)
            job.log(f"{name}: {type(err).__name__}: {err}")
            continue
        if mask is None:
            skipped += 1
        else:
            write_mask(path, mask)
            written += 1
    else:
        done = len(files)
    job.progress(done, len(files), "done" if done == len(files) else "cancelled")
    message = f"{written} mask(s) written, {skipped} kept (already masked), {len(failed)} failed"
    return {"message": message, "written": written, "skipped": skipped, "failed": failed, "total": len(files),
            "cancelled": done < len(files)}
