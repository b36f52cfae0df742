"""A training batch, and turning planned samples into tensors (pixels or cached latents)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from PIL import Image

from .buckets import Size
from .errors import DataError
from .images import load_mask, load_rgb
from .latent_cache import LatentCache
from .pixels import mask_tensor, pixels_tensor
from .planning import PreparedConcept, Sample, Variant
from .scan import ImageItem
from .transform import render


@dataclass
class Batch:
    """One step's data. Exactly one of ``latents`` (latent caching on) or ``pixels`` is set.

    size: (height, width) in pixels, the same for every sample of the batch.
    latents: [B, C, height/8, width/8] as the VAE returned them.
    pixels: float32 [B, 3, height, width] in [-1, 1].
    mask: float32 [B, 1, height, width] in [0, 1] (1 = train on this pixel), None when no sample
        has a mask; samples without a mask get an all-ones mask when another one has one.
    """

    size: Size
    captions: list[str]
    loss_weights: torch.Tensor
    image_paths: list[str]
    latents: torch.Tensor | None = None
    pixels: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.captions)


def render_pixels(item: ImageItem, variant: Variant) -> torch.Tensor:
    try:
        img = load_rgb(item.path)
    except Exception as exc:
        raise DataError(f"image {item.path} could not be read any more: {exc}") from exc
    with img:
        fitted = render(img, variant.crop, variant.bucket, variant.flip, angle=variant.augment.angle)
        return pixels_tensor(fitted, variant.augment)


def render_mask(item: ImageItem, variant: Variant) -> torch.Tensor | None:
    """The mask cut, mirrored and rotated exactly like its image (its own size is mapped onto the
    image's); colour changes do not apply to it."""
    if item.mask_path is None:
        return None
    try:
        mask = load_mask(item.mask_path)
    except Exception as exc:
        raise DataError(f"mask {item.mask_path} could not be read any more: {exc}") from exc
    with mask:
        return mask_tensor(render(mask, variant.crop, variant.bucket, variant.flip, Image.Resampling.BILINEAR, variant.augment.angle))


def latent_key(cache: LatentCache, item: ImageItem, variant: Variant) -> str:
    return cache.key(
        item.path, item.file_size, item.mtime_ns, variant.bucket, variant.crop, variant.flip, variant.resolution, variant.augment
    )


def make_batch(samples: list[Sample], concepts: list[PreparedConcept], cache: LatentCache | None) -> Batch:
    items = [concepts[s.concept].items[s.item] for s in samples]
    height, width = samples[0].variant.bucket
    masks = [render_mask(item, s.variant) for item, s in zip(items, samples, strict=True)]
    mask = None
    if any(m is not None for m in masks):
        mask = torch.stack([m if m is not None else torch.ones(1, height, width) for m in masks])
    batch = Batch(
        size=(height, width),
        captions=[s.caption for s in samples],
        loss_weights=torch.tensor([concepts[s.concept].loss_weight for s in samples], dtype=torch.float32),
        image_paths=[str(item.path) for item in items],
        mask=mask,
    )
    if cache is not None:
        batch.latents = torch.stack([cache.load(latent_key(cache, item, s.variant)) for item, s in zip(items, samples, strict=True)])
    else:
        batch.pixels = torch.stack([render_pixels(item, s.variant) for item, s in zip(items, samples, strict=True)])
    return batch
