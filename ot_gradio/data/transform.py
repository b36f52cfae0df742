"""Fit an image to its bucket: scale to cover, crop a window, maybe mirror; then to tensors.

The crop is described in the coordinates of the scaled image (``CropBox``), which is what the
latent cache keys on. Rendering maps that window back onto whatever image it is given (the image
itself, or a mask of another size), so a mask always lines up with its image.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
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


def render(img: Image.Image, crop: CropBox, bucket: Size, flip: bool, resample: int = Image.Resampling.LANCZOS) -> Image.Image:
    """Resize + crop in one resampling pass (PIL's ``box``), then mirror if asked."""
    bh, bw = bucket
    sx = img.width / crop.scaled_w
    sy = img.height / crop.scaled_h
    box = (crop.left * sx, crop.top * sy, (crop.left + bw) * sx, (crop.top + bh) * sy)
    out = img.resize((bw, bh), resample, box=box, reducing_gap=3.0)
    if flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return out


def pixels_tensor(img: Image.Image) -> torch.Tensor:
    """RGB image -> float32 [3, H, W] in [-1, 1] (what SD VAEs expect)."""
    arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div_(127.5).sub_(1.0)


def mask_tensor(img: Image.Image) -> torch.Tensor:
    """Greyscale mask -> float32 [1, H, W] in [0, 1]."""
    arr = np.asarray(img.convert("L"), dtype=np.uint8)
    return torch.from_numpy(arr.copy()).unsqueeze(0).float().div_(255.0)
