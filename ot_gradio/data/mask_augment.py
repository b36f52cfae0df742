"""Masked-training augmentations of an image with a mask file, before it is fitted to a bucket.

As OneTrainer (its data loader's mask augmentation, in this order, only with masked training):
- random circular mask shrink: a centre drawn at random inside the mask and a radius of
  0.2 to 1 times the mask's furthest reach from it; the mask keeps only its part inside that disc.
- random mask rotate and crop: the image and its mask turn by -20..20 degrees about the centre of
  the mask's bounding box, then are cut to that box (of the turned mask) grown by 10-30% padding
  on each side (drawn per side), grown further to at least the run's smallest resolution (aspect
  kept), moved back inside the image and clipped to it. The cut image is what is bucketed, so
  the masked area fills much of the sample.

A draw is planned without touching the full image: from the mask scaled to at most ``GRID`` pixels
a side, read once per image (`mask_grid`), so a box can be off by a grid cell (under 1% of a
side). Rendering applies exactly the drawn numbers, which the latent cache keys on (rounded, as
the other augmentations' are). Images without a mask file are left alone (they train whole).
No torch here: planning and the page's summary use this module.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from .images import load_alpha, load_mask

GRID = 128
SHRINK_MIN, SHRINK_MAX = 0.2, 1.0
MAX_ANGLE, MIN_PADDING, MAX_PADDING = 20.0, 0.10, 0.30


@dataclass(frozen=True)
class MaskDraw:
    """One draw, in pixels of the image as loaded. shrink: (centre y, centre x, radius) of the disc
    the mask is cut to; angle and centre (y, x): the turn before the cut; box: (top, left, bottom,
    right) of the cut, None without rotate and crop."""

    shrink: tuple[float, float, float] | None = None
    angle: float = 0.0
    centre: tuple[float, float] = (0.0, 0.0)
    box: tuple[int, int, int, int] | None = None

    def key(self) -> list:
        return [list(self.shrink or ()), self.angle, list(self.centre), list(self.box or ())]

    def size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of the image after the cut."""
        if self.box is None:
            return width, height
        top, left, bottom, right = self.box
        return right - left, bottom - top


def mask_grid(path: Path, width: int, height: int, alpha: bool = False) -> np.ndarray:
    """The mask in [0, 1], stretched to its image's aspect and scaled to at most GRID a side;
    `alpha`: the image's own alpha channel is its mask (Alpha as mask)."""
    scale = min(1.0, GRID / max(width, height))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    with (load_alpha if alpha else load_mask)(path) as mask:
        return np.asarray(mask.resize(size, Image.Resampling.BILINEAR), dtype=np.float32) / 255.0


def _bounds(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    """(top, left, bottom, right) of the pixels above 0.5, bottom/right exclusive; None: none."""
    rows, cols = np.nonzero(mask > 0.5)
    if rows.size == 0:
        return None
    return int(rows.min()), int(cols.min()), int(rows.max()) + 1, int(cols.max()) + 1


@dataclass(frozen=True)
class MaskAugmentSettings:
    shrink: bool = False
    rotate_crop: bool = False
    min_size: int = 512  # the run's smallest resolution side

    @classmethod
    def from_config(cls, image: object | None, masked: bool, min_size: int) -> MaskAugmentSettings:
        if image is None or not masked:
            return cls()
        return cls(bool(getattr(image, "enable_random_circular_mask_shrink", False)),
                   bool(getattr(image, "enable_random_mask_rotate_crop", False)), int(min_size))

    @property
    def active(self) -> bool:
        return self.shrink or self.rotate_crop

    def draw(self, grid: np.ndarray, width: int, height: int, shrink_rng: random.Random, crop_rng: random.Random) -> MaskDraw:
        """One draw for an image of (width, height) whose mask is `grid` (`mask_grid`); each
        augmentation takes numbers from its own stream only, so turning one on leaves the other's draws."""
        sy, sx = height / grid.shape[0], width / grid.shape[1]
        ys = (np.arange(grid.shape[0], dtype=np.float32) + 0.5) * sy - 0.5  # grid cell centres in image pixels
        xs = (np.arange(grid.shape[1], dtype=np.float32) + 0.5) * sx - 0.5
        shrink = None
        if self.shrink:
            pick = np.random.default_rng(shrink_rng.randint(0, 1 << 30)).random(grid.shape, dtype=np.float32) * grid
            iy, ix = np.unravel_index(int(np.argmax(pick)), grid.shape)
            cy, cx = float(ys[iy]), float(xs[ix])
            distance = np.sqrt((ys[:, None] - cy) ** 2 + (xs[None, :] - cx) ** 2)
            radius = shrink_rng.uniform(SHRINK_MIN, SHRINK_MAX) * float((grid * distance).max())
            shrink = (round(cy, 2), round(cx, 2), round(radius, 2))
            grid = grid * (distance <= shrink[2])
        if not self.rotate_crop:
            return MaskDraw(shrink=shrink)
        found = _bounds(grid) or (0, 0, grid.shape[0], grid.shape[1])
        centre = (round((found[0] + found[2]) / 2 * sy, 2), round((found[1] + found[3]) / 2 * sx, 2))
        angle = round(crop_rng.uniform(-MAX_ANGLE, MAX_ANGLE), 2)
        turned = np.asarray(Image.fromarray(grid.astype(np.float32), "F").rotate(
            angle, Image.Resampling.BILINEAR, center=(centre[1] / sx, centre[0] / sy)))
        top, left, bottom, right = _bounds(turned) or found
        return MaskDraw(shrink, angle, centre, self._box(top * sy, left * sx, bottom * sy, right * sx, width, height, crop_rng))

    def _box(self, top: float, left: float, bottom: float, right: float, width: int, height: int,
             rng: random.Random) -> tuple[int, int, int, int]:
        h, w = bottom - top, right - left
        grow_y = ((h / (1 - MIN_PADDING) - h) / 2, (h / (1 - MAX_PADDING) - h) / 2)
        grow_x = ((w / (1 - MIN_PADDING) - w) / 2, (w / (1 - MAX_PADDING) - w) / 2)
        top -= rng.uniform(*grow_y)
        bottom += rng.uniform(*grow_y)
        left -= rng.uniform(*grow_x)
        right += rng.uniform(*grow_x)
        area = (bottom - top) * (right - left)
        if 0 < area < self.min_size**2:
            grow = math.sqrt(self.min_size**2 / area) - 1
            dy, dx = grow * (bottom - top), grow * (right - left)
            top, bottom, left, right = top - dy, bottom + dy, left - dx, right + dx
        top, bottom = _inside(top, bottom, height)
        left, right = _inside(left, right, width)
        box = int(max(0, top)), int(max(0, left)), int(min(height, bottom)), int(min(width, right))
        return box if box[2] > box[0] and box[3] > box[1] else (0, 0, height, width)


def _inside(low: float, high: float, limit: int) -> tuple[float, float]:
    """Move [low, high) back inside [0, limit) where it sticks out (OneTrainer's order: low first)."""
    if low < 0:
        low, high = 0.0, high - low
    if high > limit:
        low, high = low + limit - high, float(limit)
    return low, high


def shrink_mask(mask: Image.Image, draw: MaskDraw) -> Image.Image:
    """The mask ("L", at its image's size) outside the draw's disc made black."""
    if draw.shrink is None:
        return mask
    cy, cx, radius = draw.shrink
    ys = np.arange(mask.height, dtype=np.float32)[:, None] - cy
    xs = np.arange(mask.width, dtype=np.float32)[None, :] - cx
    inside = ys**2 + xs**2 <= radius**2
    return Image.fromarray(np.where(inside, np.asarray(mask), 0).astype(np.uint8), "L")


def rotate_crop(img: Image.Image, draw: MaskDraw) -> Image.Image:
    """An image (or its mask, at the image's size) turned and cut as drawn; uncovered corners black."""
    if draw.box is None:
        return img
    if draw.angle:
        fill = 0 if img.mode in ("L", "1", "I", "F") else (0,) * len(img.getbands())
        img = img.rotate(draw.angle, Image.Resampling.BILINEAR, center=(draw.centre[1], draw.centre[0]), fillcolor=fill)
    top, left, bottom, right = draw.box
    return img.crop((left, top, right, bottom))
