"""Painted masks: the image editor's layers <-> `<image>-masklabel.png` (white = train, black = ignore).
A clip's mask is painted on its first frame and holds for each of its frames (`clip-masklabel.png`).

Torch-free (PIL + numpy) so the page can call it directly. Decisions:
- The mask is the union of the painted (non-transparent) pixels of every editor layer; colour does
  not matter, so an existing mask loaded as a tinted, semi-transparent layer survives a save.
- The browser may hand the layers back at another size than the image (a canvas scaled to fit the
  screen); they are binarised first and then scaled with NEAREST, so the file holds only 0 and 255.
- The file is written at the image's own size (after EXIF orientation, as the scanner measures it),
  atomically, as a lossless greyscale PNG; the previous mask is kept as `<mask>.png.bak`, a name the
  dataset scanner neither takes for an image nor for a mask.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..data.images import (
    PAGE_MAX_PIXELS,
    ImageTooLargeError,
    is_image_name,
    is_mask_name,
    load_mask,
    mask_path_for,
    open_image,
)
from ..data.scan import is_regular_file
from ..data.video import is_video_name, still_image
from ..fsutil import atomic_write, atomic_write_bytes

__all__ = [
    "BACKUP_SUFFIX", "OVERLAY_ALPHA", "OVERLAY_RGB", "MaskError", "backup_path_for", "editor_value", "filled_value",
    "image_size", "list_images", "mask_from_editor", "overlay_preview", "save_mask",
]

OVERLAY_RGB = (255, 0, 80)  # the brush colour too, so painted and loaded areas look the same
OVERLAY_ALPHA = 150  # see-through enough to paint along the image's edges
PAINTED_ALPHA = 32  # faint antialiased fringes of a stroke below this stay unpainted
BACKUP_SUFFIX = ".bak"
ASPECT_TOLERANCE = 0.03


class MaskError(ValueError):
    """The editor's value or the image cannot make a mask; the message says what to do."""


def backup_path_for(mask_path: Path) -> Path:
    """`photo-masklabel.png` -> `photo-masklabel.png.bak` (no image suffix: scanners skip it)."""
    return mask_path.with_name(mask_path.name + BACKUP_SUFFIX)


def list_images(folder: Path) -> list[Path]:
    """Training images and clips directly in `folder` (no masks, no hidden files), sorted by name."""
    names = sorted(n for n in os.listdir(folder)
                   if not n.startswith(".") and ((is_image_name(n) and not is_mask_name(n)) or is_video_name(n)))
    return [folder / n for n in names if is_regular_file(folder / n)]  # not a pipe named like an image


def _page_image(image_path: Path) -> Image.Image:
    """The image (a clip: its first frame) as RGB, within the page's pixel limit (MaskError naming it otherwise)."""
    try:
        return still_image(image_path, PAGE_MAX_PIXELS)
    except ImageTooLargeError as err:
        raise MaskError(f"{err}, or paint its mask in an image editor") from None


def image_size(image_path: Path) -> tuple[int, int]:
    """(width, height) after EXIF orientation: the size the trainer and the scanner see."""
    with _page_image(image_path) as img:
        return img.size


def _as_array(item: Any) -> np.ndarray | None:
    """An editor image (numpy, PIL, file path or bytes) as an RGBA uint8 array; None if absent."""
    if item is None:
        return None
    if isinstance(item, np.ndarray):
        arr = item
        if arr.ndim >= 2 and arr.shape[0] * arr.shape[1] > PAGE_MAX_PIXELS:
            raise MaskError(f"the editor sent a {arr.shape[1]}x{arr.shape[0]} layer, more than the page's "
                            f"{PAGE_MAX_PIXELS / 1e6:.0f} megapixels; reopen the image")
        if arr.dtype != np.uint8:
            arr = np.clip(arr, 0, 255).astype(np.uint8)
        if arr.ndim == 2:
            return np.dstack([arr, arr, arr, np.where(arr > 0, 255, 0).astype(np.uint8)])
        if arr.shape[2] == 4:
            return arr
        rgb = arr[:, :, :3]
        alpha = np.where(rgb.max(axis=2) > 0, 255, 0).astype(np.uint8)  # alpha dropped: transparent pixels are black
        return np.dstack([rgb, alpha])
    try:
        if isinstance(item, (bytes, bytearray)):
            item = open_image(BytesIO(item), "the editor's layer", PAGE_MAX_PIXELS)
        elif isinstance(item, (str, os.PathLike)):
            item = open_image(item, "the editor's layer", PAGE_MAX_PIXELS)
    except ImageTooLargeError as err:
        raise MaskError(f"{err}; reopen the image") from None
    except OSError as err:
        raise MaskError(f"the editor's layer is not an image the page can read ({err})") from None
    if isinstance(item, Image.Image):
        img = item
        if img.mode in ("RGB", "L", "P") and "transparency" not in img.info:
            return _as_array(np.asarray(img.convert("RGB")))
        return np.asarray(img.convert("RGBA"))
    raise MaskError(f"the editor sent an image of an unknown kind ({type(item).__name__})")


def _check_aspect(canvas: tuple[int, int], size: tuple[int, int]) -> None:
    cw, ch = canvas
    w, h = size
    if cw <= 0 or ch <= 0 or abs(cw / ch - w / h) > ASPECT_TOLERANCE * (w / h):
        raise MaskError(
            f"the painted canvas is {cw}x{ch} but the image is {w}x{h} (another shape); it cannot be mapped back. "
            "Reopen the image and paint again without cropping or resizing the canvas."
        )


def mask_from_editor(value: Mapping[str, Any] | None, size: tuple[int, int]) -> Image.Image:
    """The binary mask ("L", only 0 and 255, `size` = the image's own (width, height)) painted in
    an ImageEditor value: every layer's non-transparent pixel is white, the rest black."""
    if not value:
        raise MaskError("the editor is empty: open an image first")
    layers = [arr for arr in (_as_array(layer) for layer in value.get("layers") or []) if arr is not None]
    if not layers:
        return Image.new("L", size, 0)
    canvas = (layers[0].shape[1], layers[0].shape[0])
    painted = np.zeros((canvas[1], canvas[0]), dtype=bool)
    for arr in layers:
        if (arr.shape[1], arr.shape[0]) != canvas:
            raise MaskError(f"the editor's layers have different sizes ({canvas} and {arr.shape[1]}x{arr.shape[0]}); reopen the image")
        painted |= arr[:, :, 3] >= PAINTED_ALPHA
    mask = Image.fromarray(np.where(painted, 255, 0).astype(np.uint8), "L")
    if canvas != tuple(size):
        _check_aspect(canvas, size)
        mask = mask.resize(size, Image.Resampling.NEAREST)
    return mask


def _binary(mask: Image.Image) -> Image.Image:
    arr = np.asarray(mask.convert("L"))
    return Image.fromarray(np.where(arr >= 128, 255, 0).astype(np.uint8), "L")


def save_mask(image_path: Path, mask: Image.Image) -> Path:
    """Write `mask` as `<stem>-masklabel.png` next to the image, atomically, keeping the old mask
    as `<mask>.bak`. The mask must already be at the image's own size."""
    image_path = Path(image_path)
    if is_mask_name(image_path.name):
        raise MaskError(f"'{image_path.name}' is a mask itself; pick the image it belongs to")
    size = image_size(image_path)
    if mask.size != size:
        raise MaskError(f"the mask is {mask.size[0]}x{mask.size[1]} but '{image_path.name}' is {size[0]}x{size[1]}")
    target = mask_path_for(image_path)
    binary = _binary(mask)
    if target.is_file():
        atomic_write_bytes(backup_path_for(target), target.read_bytes())
    atomic_write(target, lambda tmp: binary.save(tmp, format="PNG", optimize=True))
    return target


def _overlay_layer(mask: Image.Image) -> np.ndarray:
    painted = np.asarray(mask) >= 128
    layer = np.zeros(painted.shape + (4,), dtype=np.uint8)
    layer[painted] = OVERLAY_RGB + (OVERLAY_ALPHA,)
    return layer


def _existing_mask(image_path: Path, size: tuple[int, int]) -> Image.Image:
    path = mask_path_for(image_path)
    if not path.is_file():
        return Image.new("L", size, 0)
    try:
        mask = load_mask(path, PAGE_MAX_PIXELS)
    except Exception as exc:  # an unreadable mask must not block repainting it
        raise MaskError(f"cannot read the existing mask '{path.name}' ({exc}); delete or replace it") from None
    return _binary(mask.resize(size, Image.Resampling.NEAREST) if mask.size != size else mask)


def editor_value(image_path: Path, mask: Image.Image | None = None) -> dict[str, Any]:
    """The editor's value for an image: the image as background and one layer holding `mask` (the
    existing mask if None) as a tinted, semi-transparent overlay, so it is both visible and editable."""
    image_path = Path(image_path)
    try:
        background = still_image(image_path, PAGE_MAX_PIXELS)
    except Exception as exc:
        raise MaskError(f"cannot open image '{image_path.name}': {exc}") from None
    size = background.size
    if mask is None:
        mask = _existing_mask(image_path, size)
    layer = _overlay_layer(_binary(mask))
    composite = Image.alpha_composite(background.convert("RGBA"), Image.fromarray(layer, "RGBA")).convert("RGB")
    return {"background": np.asarray(background), "layers": [layer], "composite": np.asarray(composite)}


def filled_value(image_path: Path, white: bool) -> dict[str, Any]:
    """An editor value whose mask covers the whole image (`white`) or nothing."""
    size = image_size(image_path)
    return editor_value(image_path, Image.new("L", size, 255 if white else 0))


def overlay_preview(image_path: Path, mask: Image.Image) -> Image.Image:
    """The image with the trained (white) area tinted and the ignored (black) area darkened."""
    img = np.asarray(_page_image(image_path), dtype=np.float32)
    painted = (np.asarray(mask.convert("L").resize((img.shape[1], img.shape[0]), Image.Resampling.NEAREST)) >= 128)[..., None]
    tint = np.array(OVERLAY_RGB, dtype=np.float32)
    out = np.where(painted, img * 0.6 + tint * 0.4, img * 0.35)
    return Image.fromarray(np.clip(out + 0.5, 0, 255).astype(np.uint8), "RGB")
