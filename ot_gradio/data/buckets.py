"""Aspect-ratio buckets: a set of sizes of about the target area, one per aspect ratio.

With bucket step 0 (the default) the buckets are OneTrainer's (mgds' AspectBucketing): the 9
aspect ratios 1:1 to 4:1 and their inverses, each scaled to the area of the resolution's square,
each side rounded (Python's ``round``) to the family's quantization in OneTrainer's data loader
(``FamilyInfo.bucket_quantization``: 8 px for SD 1.x/2.x, 16 PixArt, 32 Sana, 128 Würstchen and
Stable Cascade, 64 the others), duplicates dropped; an image takes the bucket whose height / width
is nearest to its own (linear difference, first of a tie in OneTrainer's order). A fixed "WxH"
resolution (one size, no list: ``FixedSize``) is one bucket for every image, its sides rounded the
same way, as OneTrainer takes it.

A resolution whose side is under 4 times the quantization (tiny test models at 64-128 px, where 64
px would leave one bucket) rounds to the per-resolution step instead: about an eighth of the side
(64 from 512 px up, 32 from 256, 16 from 128, 8 below). Either is raised to a multiple of the
model's own multiple (``step``: VAE x patch; a Flux side stays a multiple of 16).

With a kohya step (kohya's ``bucket_reso_steps``) the set is kohya's instead: every width from
the smallest to the largest bucket side in that step, each with the tallest height in that step
that keeps the area within the target's, both ways round, and the square (sd-scripts'
``make_bucket_resolutions``); a "WxH" resolution is a target area there, as in sd-scripts.

``Bucketing`` holds every setting a bucket depends on besides the image and the resolution; it is
read from the config once and handed to the data layer as one value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..config.families import family_info
from ..config.resolution import FixedSize, kohya_bucket_sides

ASPECTS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0)  # width / height of OneTrainer's wide buckets

Size = tuple[int, int]  # (height, width) in pixels

__all__ = ["ASPECTS", "Bucketing", "FixedSize", "Size", "assign_bucket", "bucket_sizes", "bucket_step", "kohya_bucket_sizes",
           "onetrainer_step"]


def as_size(resolution: int | Size) -> Size:
    if isinstance(resolution, int):
        return (resolution, resolution)
    h, w = resolution
    return (int(h), int(w))


def bucket_step(resolution: int | Size) -> int:
    """The per-resolution step: about an eighth of the side (64 from 512 px, 32 from 256, 16 from 128, 8 below)."""
    h, w = as_size(resolution)
    side = math.sqrt(h * w)
    for step in (64, 32, 16):
        if side >= step * 8:
            return step
    return 8


def onetrainer_step(resolution: int | Size, quantization: int | None, need: int | None = None) -> int:
    """The step bucket sides are rounded to at bucket step 0: the family's OneTrainer
    ``quantization`` where the resolution's side is at least 4 times it, else ``bucket_step``;
    raised to a multiple of ``need``, the model's own multiple."""
    h, w = as_size(resolution)
    step = quantization if quantization and math.sqrt(h * w) >= 4 * quantization else bucket_step(resolution)
    return math.lcm(step, need) if need else step


def _quantize(x: float, step: int) -> int:
    return max(step, round(x / step) * step)  # OneTrainer's rounding; never 0


@lru_cache(maxsize=256)
def _onetrainer_buckets(side: float, step: int) -> tuple[Size, ...]:
    """The buckets of a square of ``side`` in OneTrainer's order (its list of a set), which decides a tie."""
    scaled = [(1.0 / math.sqrt(1.0 * aspect) * side, aspect / math.sqrt(1.0 * aspect) * side) for aspect in ASPECTS]
    scaled += [(w, h) for h, w in scaled]
    return tuple({(_quantize(h, step), _quantize(w, step)) for h, w in scaled})


def _wide_to_tall(sizes: Iterable[Size]) -> tuple[Size, ...]:
    return tuple(sorted(sizes, key=lambda s: (s[0] / s[1], s)))


def _nearest_aspect(sizes: tuple[Size, ...], width: int, height: int) -> Size:
    """The size whose height / width is nearest to the image's (linear difference; the first of a tie)."""
    aspect = height / width
    return min(sizes, key=lambda s: abs(s[0] / s[1] - aspect))


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
    """OneTrainer's (height, width) buckets of a target resolution (the square of its area) with
    sides rounded to ``step`` (None: ``bucket_step`` of the resolution), sorted from wide to tall."""
    size = as_size(resolution)
    step = step or bucket_step(size)
    if step % 8:
        raise ValueError(f"bucket step {step} must be a multiple of 8")
    return _wide_to_tall(_onetrainer_buckets(math.sqrt(size[0] * size[1]), step))


@dataclass(frozen=True)
class Bucketing:
    """How images are grouped by size. ``enabled``: aspect ratio bucketing (off: every image at the
    target size); ``step``: the multiple the model needs (VAE x patch; None: 8); ``quantization``:
    the family's in OneTrainer (``onetrainer_step``; None: the per-resolution step);
    ``no_upscale``: kohya's bucket_no_upscale (see ``assign``); ``kohya_step``: kohya's
    bucket_reso_steps, 0 for OneTrainer's buckets, else kohya's buckets between ``min_side`` and
    ``max_side``."""

    enabled: bool = True
    step: int | None = None
    no_upscale: bool = False
    kohya_step: int = 0
    min_side: int = 256
    max_side: int = 2048
    quantization: int | None = None

    @classmethod
    def from_config(cls, config: Any, model_step: int | None = None) -> Bucketing:
        """From a TrainConfig or the page's config dict (blank values count as the defaults); the
        quantization is its model type's (FamilyInfo.bucket_quantization)."""
        def get(name: str, default: Any) -> Any:
            value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
            return default if value in (None, "") else value

        def on(name: str, default: bool) -> bool:
            value = get(name, default)
            return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else bool(value)

        def number(name: str, default: int) -> int:
            return int(float(get(name, default)))

        info = family_info(get("model_type", ""))
        return cls(enabled=on("aspect_ratio_bucketing", True), step=model_step, no_upscale=on("bucket_no_upscale", False),
                   kohya_step=number("bucket_resolution_step", 0), min_side=number("min_bucket_resolution", 256),
                   max_side=number("max_bucket_resolution", 2048), quantization=info.bucket_quantization if info else None)

    def quantum(self, resolution: int | Size) -> int:
        """The step every bucket side is a multiple of."""
        return self.kohya_step or onetrainer_step(resolution, self.quantization, self.step)

    def _fixed(self, resolution: int | Size) -> bool:
        return isinstance(resolution, FixedSize) and not self.kohya_step

    def sizes(self, resolution: int | Size) -> tuple[Size, ...]:
        """Every bucket of the resolution, sorted from wide to tall (a fixed size: itself, rounded to the step)."""
        if self.kohya_step:
            return kohya_bucket_sizes(as_size(resolution), self.kohya_step, self.min_side, self.max_side)
        step = self.quantum(resolution)
        if self._fixed(resolution):
            return ((_quantize(resolution[0], step), _quantize(resolution[1], step)),)
        return bucket_sizes(resolution, step)

    def _nearest(self, width: int, height: int, resolution: int | Size) -> Size:
        if self.kohya_step:  # sd-scripts' select_bucket: the image's own size if it is a bucket, else the
            sizes = self.sizes(resolution)  # nearest width / height, the first of a tie in its (width, height) order
            if (height, width) in sizes:
                return (height, width)
            aspect = width / height
            return min(sorted(sizes, key=lambda s: (s[1], s[0])), key=lambda s: abs(s[1] / s[0] - aspect))
        if self._fixed(resolution):
            return self.sizes(resolution)[0]
        h, w = as_size(resolution)
        return _nearest_aspect(_onetrainer_buckets(math.sqrt(h * w), self.quantum(resolution)), width, height)

    def assign(self, width: int, height: int, resolution: int | Size) -> Size:
        """The (height, width) bucket for an image of ``width`` x ``height``: OneTrainer's bucket
        whose height / width is nearest to the image's (linear difference), a fixed "WxH" size
        itself, or kohya's bucket as sd-scripts picks it (nearest width / height). With bucketing off, every image trains at
        the target size. ``no_upscale`` (kohya's bucket_no_upscale; not for a fixed size): an image
        smaller than that bucket takes the bucket of the largest smaller resolution, in steps of the
        bucket step, that it covers, so it is cropped but never scaled up (the smallest buckets, one
        step on their short side, for an image smaller than those); kohya's buckets are then taken
        from one step up, whatever their smallest side, as sd-scripts ignores it for such an image."""
        target = as_size(resolution)
        if not self.enabled:
            return target
        bucket = self._nearest(width, height, resolution)
        if not self.no_upscale or self._fixed(resolution) or (height >= bucket[0] and width >= bucket[1]):
            return bucket
        step = self.quantum(target)
        smaller = replace(self, min_side=step) if self.kohya_step else self
        side = int(math.sqrt(target[0] * target[1])) // step * step
        while side >= step:
            bucket = smaller._nearest(width, height, (side, side))
            if height >= bucket[0] and width >= bucket[1]:
                break
            side -= step
        return bucket


def assign_bucket(width: int, height: int, resolution: int | Size, *, enabled: bool = True, step: int | None = None,
                  no_upscale: bool = False, quantization: int | None = None) -> Size:
    """``Bucketing(enabled, step, no_upscale, quantization=quantization).assign(width, height, resolution)``."""
    return Bucketing(enabled=enabled, step=step, no_upscale=no_upscale, quantization=quantization).assign(width, height, resolution)
