"""Epoch planning: which image, at which size, crop, flip and caption, in which batch.

Planning touches no pixels, so a whole epoch (or every epoch, for the step count) is cheap to plan.
Per epoch: each concept contributes its balanced samples; each sample gets a random resolution from
its concept's list; samples are grouped by bucket size (so a batch is uniform), shuffled, cut into
batches, and the batch order is shuffled. The remainder of a bucket that cannot fill a batch is
dropped for that epoch (which samples, is random per epoch, so none is dropped for good); the
plan counts them so the page can show it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .balancing import epoch_indices
from .buckets import Size, assign_bucket
from .captions import pick_caption
from .scan import ConceptScan, ImageItem
from .seeding import rng_for
from .transform import CropBox, choose_crop


@dataclass(frozen=True)
class Variant:
    """One way an image is fitted to a bucket; the unit the latent cache stores."""

    resolution: Size
    bucket: Size
    crop: CropBox
    flip: bool


@dataclass(frozen=True)
class Sample:
    concept: int
    item: int
    variant: Variant
    caption: str


@dataclass
class PreparedConcept:
    """A scanned concept with the settings planning needs."""

    config: object
    scan: ConceptScan
    resolutions: list[Size]
    bucketing: bool = True
    bucket_step: int | None = None
    _buckets: dict[tuple[int, Size], Size] = field(default_factory=dict, repr=False)

    @property
    def items(self) -> list[ImageItem]:
        return self.scan.items

    @property
    def seed(self) -> int:
        return int(getattr(self.config, "seed", 0))

    @property
    def loss_weight(self) -> float:
        return float(getattr(self.config, "loss_weight", 1.0))

    def _image_option(self, name: str) -> bool:
        return bool(getattr(self.config.image, name, False))

    def bucket(self, index: int, resolution: Size) -> Size:
        key = (index, resolution)
        if key not in self._buckets:
            item = self.items[index]
            self._buckets[key] = assign_bucket(item.width, item.height, resolution, enabled=self.bucketing, step=self.bucket_step)
        return self._buckets[key]

    def flips(self) -> tuple[bool, ...]:
        """Flip states an epoch can use: a fixed flip wins over a random one."""
        if self._image_option("enable_fixed_flip"):
            return (True,)
        if self._image_option("enable_random_flip"):
            return (False, True)
        return (False,)

    def fixed_crop(self, index: int, resolution: Size) -> CropBox:
        """The crop used with latent caching: a cached latent cannot be re-cropped, so the window
        is fixed per image and resolution, seeded by the concept seed (not the run seed, so a new
        run seed reuses the cache)."""
        item = self.items[index]
        bucket = self.bucket(index, resolution)
        rng = rng_for("crop", self.seed, item.relpath, resolution) if self._image_option("enable_crop_jitter") else None
        return choose_crop(item.width, item.height, bucket, rng)

    def cached_variants(self, index: int) -> list[Variant]:
        """Every variant of one image any epoch can ask for with latent caching on."""
        out = []
        for resolution in self.resolutions:
            crop = self.fixed_crop(index, resolution)
            bucket = self.bucket(index, resolution)
            out.extend(Variant(resolution, bucket, crop, flip) for flip in self.flips())
        return out

    def variant(self, index: int, resolution: Size, rng: random.Random, cached: bool) -> Variant:
        item = self.items[index]
        bucket = self.bucket(index, resolution)
        if cached:
            crop = self.fixed_crop(index, resolution)
        else:
            jitter = rng if self._image_option("enable_crop_jitter") else None
            crop = choose_crop(item.width, item.height, bucket, jitter)
        flips = self.flips()
        flip = flips[0] if len(flips) == 1 else rng.random() < 0.5
        return Variant(resolution, bucket, crop, flip)


@dataclass
class EpochPlan:
    epoch: int
    batches: list[list[Sample]]
    dropped: dict[Size, int]
    sample_count: int

    @property
    def dropped_samples(self) -> int:
        return sum(self.dropped.values())


def plan_epoch(concepts: list[PreparedConcept], epoch: int, seed: int, batch_size: int, cached: bool) -> EpochPlan:
    rng_resolution = rng_for("resolution", seed, epoch)
    rng_augment = rng_for("augment", seed, epoch)
    rng_caption = rng_for("caption", seed, epoch)
    groups: dict[Size, list[Sample]] = {}
    count = 0
    for ci, concept in enumerate(concepts):
        rng_balance = rng_for("balance", seed, concept.seed, ci, epoch)
        strategy = getattr(concept.config, "balancing_strategy", "REPEATS")
        balancing = float(getattr(concept.config, "balancing", 1.0))
        for index in epoch_indices(len(concept.items), balancing, strategy, rng_balance):
            resolutions = concept.resolutions
            resolution = resolutions[0] if len(resolutions) == 1 else rng_resolution.choice(resolutions)
            variant = concept.variant(index, resolution, rng_augment, cached)
            caption = pick_caption(concept.items[index].captions, rng_caption, getattr(concept.config, "text", None))
            groups.setdefault(variant.bucket, []).append(Sample(ci, index, variant, caption))
            count += 1

    rng_batch = rng_for("batches", seed, epoch)
    batches: list[list[Sample]] = []
    dropped: dict[Size, int] = {}
    for bucket in sorted(groups):
        group = groups[bucket]
        rng_batch.shuffle(group)
        full = len(group) - len(group) % batch_size
        if full < len(group):
            dropped[bucket] = len(group) - full
        batches.extend(group[k : k + batch_size] for k in range(0, full, batch_size))
    rng_batch.shuffle(batches)
    return EpochPlan(epoch, batches, dropped, count)
