"""Aspect-ratio buckets: a set of sizes of about the target area, one per aspect ratio.

Sizes are multiples of a step that is itself a multiple of 8 (the VAE's downscale factor). The
default step is about an eighth of the side (64 from 512 px up, 32 from 256, 16 from 128, 8
below), like OneTrainer's 64 for real models while still giving tiny 64 px test models distinct
buckets. A model whose transformer needs larger multiples (patch size) passes its own ``step``.
Aspect ratios go up to 4:1 both ways, as in OneTrainer.

With a kohya step (kohya's ``bucket_reso_steps``) the set is kohya's instead: every width from
the smallest to the largest bucket side in that step, each with the tallest height in that step
that keeps the area within the target's, both ways round, and the square (sd-scripts'
``make_bucket_resolutions``).

``Bucketing`` holds every setting a bucket depends on besides the image and the resolution; it is
read from the config once and handed to the data layer as one value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..config.resolution import kohya_bucket_sides

ASPECTS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0)

Size = tuple[int, int]  # (height, width) in pixels


def as_size(resolution: int | Size) -> Size:
    if isinstance(resolution, int):
        return (resolution, resolution)
    h, w = resolution
    return (int(h), int(w))


def bucket_step(resolution: int | Size) -> int:
    h, w = as_size(resolution)
    side = math.sqrt(h * w)
    for step in (64, 32, 16):
        if side >= step * 8:
            return step
    return 8


@lru_cache(maxsize=256)
def _bucket_sizes(size: Size, step: int) -> tuple[Size, ...]:
    h, w = size
    area = h * w

    def quantize(x: float) -> int:
        return max(step, int(round(x / step)) * step)

    sizes = {size}
    for aspect in ASPECTS:
        for ratio in (aspect, 1.0 / aspect):  # ratio = height / width
            sizes.add((quantize(math.sqrt(area * ratio)), quantize(math.sqrt(area / ratio))))
    return _wide_to_tall(sizes)


def _wide_to_tall(sizes: set[Size]) -> tuple[Size, ...]:
    return tuple(sorted(sizes, key=lambda s: (s[0] / s[1], s)))


@lru_cache(maxsize=256)
def kohya_bucket_sizes(size: Size, step: int, min_side: int = 256, max_side: int = 2048) -> tuple[Size, ...]:
    """kohya's buckets for a target (height, width): the square of the target's area, and every
    width from ``min_side`` to ``max_side`` in ``step`` with the tallest height in ``step`` (at
    most ``max_side``) whose area is within the target's, both ways round; sorted wide to tall."""
    if step < 1 or step % 8:
        raise ValueError(f"bucket step {step} must be a multiple of 8")
    low, high = kohya_bucket_sides(step, min_side, max_side)
    area = size[0] * size[1]
    square = max(step, int(math.sqrt(area)) // step * step)
    sizes = {(square, square)}
    for width in range(max(low, step), high + 1, step):
        height = min(high, area // width // step * step)
        if height >= max(low, step):
            sizes.update(((height, width), (width, height)))
    return _wide_to_tall(sizes)


def bucket_sizes(resolution: int | Size, step: int | None = None) -> tuple[Size, ...]:
    """All (height, width) buckets for a target resolution, sorted from wide to tall."""
    size = as_size(resolution)
    step = step or bucket_step(size)
    if step % 8:
        raise ValueError(f"bucket step {step} must be a multiple of 8")
    return _bucket_sizes(size, step)


@dataclass(frozen=True)
class Bucketing:
    """How images are grouped by size. ``enabled``: aspect ratio bucketing (off: every image at the
    target size); ``step``: the multiple the model needs (VAE x patch; None: ``bucket_step`` of the
    resolution); ``no_upscale``: kohya's bucket_no_upscale (see ``assign``); ``kohya_step``: kohya's
    bucket_reso_steps, 0 for the aspect list above, else kohya's buckets between ``min_side`` and
    ``max_side``."""

    enabled: bool = True
    step: int | None = None
    no_upscale: bool = False
    kohya_step: int = 0
    min_side: int = 256
    max_side: int = 2048

    @classmethod
    def from_config(cls, config: Any, model_step: int | None = None) -> Bucketing:
        """From a TrainConfig or the page's config dict (blank values count as the defaults)."""
        def get(name: str, default: Any) -> Any:
            value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
            return default if value in (None, "") else value

        def on(name: str, default: bool) -> bool:
            value = get(name, default)
            return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else bool(value)

        def number(name: str, default: int) -> int:
            return int(float(get(name, default)))

        return cls(enabled=on("aspect_ratio_bucketing", True), step=model_step, no_upscale=on("bucket_no_upscale", False),
                   kohya_step=number("bucket_resolution_step", 0), min_side=number("min_bucket_resolution", 256),
                   max_side=number("max_bucket_resolution", 2048))

    def quantum(self, resolution: int | Size) -> int:
        """The step every bucket side is a multiple of."""
        return self.kohya_step or self.step or bucket_step(resolution)

    def sizes(self, resolution: int | Size) -> tuple[Size, ...]:
        """Every bucket of the resolution, sorted from wide to tall."""
        if self.kohya_step:
            return kohya_bucket_sizes(as_size(resolution), self.kohya_step, self.min_side, self.max_side)
        return bucket_sizes(resolution, self.step)

    def assign(self, width: int, height: int, resolution: int | Size) -> Size:
        """The (height, width) bucket for an image of ``width`` x ``height``: the bucket whose
        aspect ratio is nearest (in log scale, so 2:1 and 1:2 are equally far from square). With
        bucketing off, every image trains at the target size. ``no_upscale`` (kohya's
        bucket_no_upscale): an image smaller than that bucket takes the bucket of the largest
        smaller resolution, in steps of the bucket step, that it covers, so it is cropped but never
        scaled up (the smallest buckets, one step on their short side, for an image smaller than
        those); kohya's buckets are then taken from one step up, whatever their smallest side, as
        sd-scripts ignores it for such an image."""
        target = as_size(resolution)
        if not self.enabled:
            return target
        want = math.log(height / width)

        def nearest(buckets: Bucketing, size: Size) -> Size:
            return min(buckets.sizes(size), key=lambda s: abs(math.log(s[0] / s[1]) - want))

        bucket = nearest(self, target)
        if not self.no_upscale or (height >= bucket[0] and width >= bucket[1]):
            return bucket
        step = self.quantum(target)
        smaller = replace(self, min_side=step) if self.kohya_step else self
        side = int(math.sqrt(target[0] * target[1])) // step * step
        while side >= step:
            bucket = nearest(smaller, (side, side))
            if height >= bucket[0] and width >= bucket[1]:
                break
            side -= step
        return bucket


def assign_bucket(width: int, height: int, resolution: int | Size, *, enabled: bool = True, step: int | None = None,
                  no_upscale: bool = False) -> Size:
    """``Bucketing(enabled, step, no_upscale).assign(width, height, resolution)``."""
    return Bucketing(enabled=enabled, step=step, no_upscale=no_upscale).assign(width, height, resolution)
