"""Parsing of resolution strings ("512", "768x512", "384,448,512"), and what kohya's bucket sides
allow of them."""

from __future__ import annotations

from typing import Any

from .families import family_info


class FixedSize(tuple):
    """A resolution given as one "WxH" (no list): (height, width). OneTrainer trains every image at
    that size (scaled to cover it, cropped) instead of aspect buckets around its area
    (data/buckets.py); in a list, or with kohya's buckets, "WxH" is an area like any size."""

    __slots__ = ()


def parse_resolutions(text: str) -> list[tuple[int, int]]:
    """Return (height, width) pairs ("768x512": width 768, height 512); a lone "WxH" is a
    FixedSize. Raises ValueError with a message a user can act on."""
    out: list[tuple[int, int]] = []
    parts = [part for part in str(text).split(",") if part.strip()]
    for part in parts:
        part = part.strip().lower()
        try:
            if "x" in part:
                w, h = (int(p) for p in part.split("x", 1))
            else:
                w = h = int(part)
        except ValueError:
            raise ValueError(f"'{part}' is not a resolution: use a number like 512, WxH like 768x512, or a list like 384,448,512") from None
        if not (64 <= w <= 8192 and 64 <= h <= 8192) or w % 8 or h % 8:
            raise ValueError(f"resolution {part} must be between 64 and 8192 and a multiple of 8")
        out.append(FixedSize((h, w)) if "x" in part and len(parts) == 1 else (h, w))
    if not out:
        raise ValueError("resolution is empty: use a number like 512 or a list like 384,448,512")
    return out


def kohya_bucket_sides(step: int, min_side: int, max_side: int) -> tuple[int, int]:
    """The smallest and largest bucket side as sd-scripts uses them: the smallest rounded down, the
    largest up, to the bucket step."""
    return min_side - min_side % step, max_side + (-max_side) % step


def bucket_problems(config: Any) -> list[str]:
    """kohya's bucket options that cannot work, each naming the field (sd-scripts refuses the same):
    a step that is no multiple of the model's, a smallest side above a training resolution's side or
    a largest side below one (the concepts' resolution overrides included)."""
    step = int(getattr(config, "bucket_resolution_step", 0) or 0)
    if not step or not config.aspect_ratio_bucketing:
        return []
    info = family_info(config.model_type)
    need = (info.bucket_step if info else None) or 8
    if step % need:  # (every model's step is a multiple of 8: the VAE's)
        return [f"bucket_resolution_step: {step} px is no multiple of {need} px, the size {config.model_type.value}'s images are "
                f"multiples of; use {step + (-step) % need}, or 0 for the aspect-ratio buckets"]
    low, high = kohya_bucket_sides(step, config.min_bucket_resolution, config.max_bucket_resolution)
    if low < step:
        return [f"min_bucket_resolution: {config.min_bucket_resolution} px rounds down to {low} at the {step} px bucket step; "
                f"raise it to {step} or more"]
    if low > high:
        return [f"min_bucket_resolution: {config.min_bucket_resolution} px is above max_bucket_resolution "
                f"{config.max_bucket_resolution} px; lower it"]
    sizes = [("resolution", config.resolution)] + [
        (f"concepts[{i}].image.resolution_override", c.image.resolution_override)
        for i, c in enumerate(config.concepts) if c.enabled and c.image.enable_resolution_override]
    out = []
    for field, text in sizes:
        try:
            sides = [side for size in parse_resolutions(text) for side in size]
        except ValueError:
            continue  # said where the resolution is checked
        if min(sides) < step:
            out.append(f"bucket_resolution_step: {step} px is above the {min(sides)} px of {field} {text}, whose buckets "
                       f"would be larger than it; lower the step to {min(sides) - min(sides) % 8 or 8} or less")
        elif min(sides) < low:
            out.append(f"min_bucket_resolution: {config.min_bucket_resolution} px (rounded to the {step} px step: {low}) is above "
                       f"the {min(sides)} px of {field} {text}; lower it to {min(sides)} or less")
        if max(sides) > high:
            out.append(f"max_bucket_resolution: {config.max_bucket_resolution} px (rounded to the {step} px step: {high}) is below "
                       f"the {max(sides)} px of {field} {text}; raise it to {max(sides)} or more")
    return out
