"""Aspect-ratio buckets: a set of sizes of about the target area, one per aspect ratio.

Sizes are multiples of a step that is itself a multiple of 8 (the VAE's downscale factor). The
default step is about an eighth of the side (64 from 512 px up, 32 from 256, 16 from 128, 8
below), like OneTrainer's 64 for real models while still giving tiny 64 px test models distinct
buckets. A model whose transformer needs larger multiples (patch size) passes its own ``step``.
Aspect ratios go up to 4:1 both ways, as in OneTrainer.
"""

from __future__ import annotations

import math
from functools import lru_cache

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
    return tuple(sorted(sizes, key=lambda s: (s[0] / s[1], s)))


def bucket_sizes(resolution: int | Size, step: int | None = None) -> tuple[Size, ...]:
    """All (height, width) buckets for a target resolution, sorted from wide to tall."""
    size = as_size(resolution)
    step = step or bucket_step(size)
    if step % 8:
        raise ValueError(f"bucket step {step} must be a multiple of 8")
    return _bucket_sizes(size, step)


def assign_bucket(width: int, height: int, resolution: int | Size, *, enabled: bool = True, step: int | None = None,
                  no_upscale: bool = False) -> Size:
    """The (height, width) bucket for an image of ``width`` x ``height``: the bucket whose aspect
    ratio is nearest (in log scale, so 2:1 and 1:2 are equally far from square). With bucketing
    off, every image trains at the target size. ``no_upscale`` (kohya's bucket_no_upscale): an
    image smaller than that bucket takes the bucket of the largest smaller resolution, in steps
    of the bucket step, that it covers, so it is cropped but never scaled up (the smallest
    buckets, one step on their short side, for an image smaller than those)."""
    target = as_size(resolution)
    if not enabled:
        return target
    want = math.log(height / width)

    def nearest(size: Size) -> Size:
        return min(bucket_sizes(size, step), key=lambda s: abs(math.log(s[0] / s[1]) - want))

    bucket = nearest(target)
    if not no_upscale or (height >= bucket[0] and width >= bucket[1]):
        return bucket
    step = step or bucket_step(target)
    side = int(math.sqrt(target[0] * target[1])) // step * step
    while side >= step:
        bucket = nearest((side, side))
        if height >= bucket[0] and width >= bucket[1]:
            break
        side -= step
    return bucket
