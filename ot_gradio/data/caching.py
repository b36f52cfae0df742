"""The caching phase before training: encode every variant any epoch can need, once.

Variants already on disk are not encoded again, so epoch 2 and a second run with the same data
run the VAE zero times, and adding one image encodes only that image's variants. Pixels exist
only for one encode chunk at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .batches import conditioning_key, latent_key, render_mask, render_pixels
from .errors import DataError
from .latent_cache import LatentCache
from .planning import PreparedConcept, Variant
from .scan import ImageItem

EncodeFn = Callable[[torch.Tensor], torch.Tensor]
# (pixels [B, 3, H, W] in [-1, 1], mask [B, 1, H, W]) -> masked-image latents (inpainting models)
ConditioningFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
ProgressFn = Callable[[int, int], None]


@dataclass
class CacheReport:
    total: int = 0  # distinct variants needed
    hits: int = 0  # found on disk
    encoded: int = 0  # variants encoded now
    encode_calls: int = 0  # calls to encode_fn
    conditioning_total: int = 0  # masked-image latents needed (inpainting models)
    conditioning_hits: int = 0
    conditioning_encoded: int = 0


def fill_cache(
    concepts: list[PreparedConcept],
    cache: LatentCache,
    encode_fn: EncodeFn,
    encode_batch_size: int = 4,
    progress: ProgressFn | None = None,
    conditioning_fn: ConditioningFn | None = None,
) -> CacheReport:
    """``conditioning_fn``: cache the masked-image latents of every variant with a mask file too."""
    needed: dict[str, tuple[ImageItem, Variant]] = {}
    needed_conditioning: dict[str, tuple[ImageItem, Variant]] = {}
    for concept in concepts:
        for index, item in enumerate(concept.items):
            for variant in concept.cached_variants(index):
                needed.setdefault(latent_key(cache, item, variant), (item, variant))
                key = conditioning_key(cache, item, variant) if conditioning_fn is not None else None
                if key is not None:
                    needed_conditioning.setdefault(key, (item, variant))

    report = CacheReport(total=len(needed), conditioning_total=len(needed_conditioning))
    total = report.total + report.conditioning_total
    done = 0
    _tell(progress, done, total)
    missing: dict[tuple[int, int], list[tuple[str, ImageItem, Variant]]] = {}
    missing_conditioning: dict[tuple[int, int], list[tuple[str, ImageItem, Variant]]] = {}
    for wanted, absent in ((needed, missing), (needed_conditioning, missing_conditioning)):
        for key, (item, variant) in wanted.items():
            if cache.has(key):
                if wanted is needed:
                    report.hits += 1
                else:
                    report.conditioning_hits += 1
                done += 1
                if done % 256 == 0:
                    _tell(progress, done, total)
            else:
                absent.setdefault(variant.bucket, []).append((key, item, variant))
    _tell(progress, done, total)

    step = max(1, int(encode_batch_size))
    for bucket in sorted(missing):
        group = missing[bucket]
        for start in range(0, len(group), step):
            chunk = group[start : start + step]
            pixels = torch.stack([render_pixels(item, variant) for _, item, variant in chunk])
            with torch.no_grad():
                latents = encode_fn(pixels)
            report.encode_calls += 1
            if not isinstance(latents, torch.Tensor) or latents.shape[0] != len(chunk):
                got = tuple(latents.shape) if isinstance(latents, torch.Tensor) else type(latents).__name__
                raise DataError(f"encode_fn returned {got} for {len(chunk)} images; expected a tensor with one latent per image")
            for (key, _, _), latent in zip(chunk, latents, strict=True):
                cache.put(key, latent)
            report.encoded += len(chunk)
            done += len(chunk)
            _tell(progress, done, total)

    for bucket in sorted(missing_conditioning):
        group = missing_conditioning[bucket]
        for start in range(0, len(group), step):
            chunk = group[start : start + step]
            pixels = torch.stack([render_pixels(item, variant) for _, item, variant in chunk])
            masks = torch.stack([render_mask(item, variant) for _, item, variant in chunk])
            with torch.no_grad():
                latents = conditioning_fn(pixels, masks)
            for (key, _, _), latent in zip(chunk, latents, strict=True):
                cache.put(key, latent)
            report.conditioning_encoded += len(chunk)
            done += len(chunk)
            _tell(progress, done, total)
    return report


def _tell(progress: ProgressFn | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)
