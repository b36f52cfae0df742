"""Fit an image to its bucket: scale to cover, crop a window, maybe mirror, maybe rotate.

The crop is described in the coordinates of the scaled image (``CropBox``), which is what the
latent cache keys on. Rendering maps that window back onto whatever image it is given (the image
itself, or a mask of another size), so a mask always lines up with its image. Rotation turns
the bucket-sized result about its centre, keeps its size and fills the uncovered corners with
black (0 in a mask: not trained), as OneTrainer does after its crop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image

from .buckets import Size


@dataclass(frozen=True)
class CropBox:
    """A bucket-sized window at (top, left) of the image scaled to (scaled_h, scaled_w)."""

    top: int
    left: int
    scaled_h: int
    scaled_w: int


def cover_size(width: int, height: int, bucket: Size) -> Size:
    """(h, w) of the image scaled (aspect kept) so it just covers the bucket."""
    bh, bw = bucket
    scale = max(bh / height, bw / width)
    return max(bh, round(height * scale)), max(bw, round(width * scale))


def choose_crop(width: int, height: int, bucket: Size, rng: random.Random | None = None) -> CropBox:
    """The centre window, or a uniformly random one when ``rng`` is given (crop jitter)."""
    bh, bw = bucket
    sh, sw = cover_size(width, height, bucket)
    if rng is None:
        return CropBox((sh - bh) // 2, (sw - bw) // 2, sh, sw)
    return CropBox(rng.randint(0, sh - bh), rng.randint(0, sw - bw), sh, sw)


def render(
    img: Image.Image, crop: CropBox, bucket: Size, flip: bool, resample: int = Image.Resampling.LANCZOS, angle: float = 0.0
) -> Image.Image:
    """Resize + crop in one resampling pass (PIL's ``box``), then mirror, then rotate by ``angle``
    degrees counter-clockwise (bilinear)."""
    bh, bw = bucket
    sx = img.width / crop.scaled_w
    sy = img.height / crop.scaled_h
    box = (crop.left * sx, crop.top * sy, (crop.left + bw) * sx, (crop.top + bh) * sy)
    out = img.resize((bw, bh), resample, box=box, reducing_gap=3.0)
    if flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    if angle:
        fill = 0 if out.mode in ("L", "1", "I", "F") else (0,) * len(out.getbands())
        out = out.rotate(angle, resample=Image.Resampling.BILINEAR, expand=False, fillcolor=fill)
    return out
