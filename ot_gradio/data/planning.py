"""Epoch planning: which image, at which size, crop, flip, rotation, colour and caption, in which batch.

Planning touches no pixels (with masked training's mask augmentations on: each mask once, scaled
down, mask_augment.py), so a whole epoch (or every epoch, for the step count) is cheap to plan.
Per epoch: each concept contributes its balanced samples (balancing.py: OneTrainer's count, the
images taken in turn through the concept's seeded order, continuing across epochs, so every image
trains equally often); each sample gets a random resolution from its concept's list; samples are
grouped by bucket size (so a batch is uniform), shuffled, cut into batches, and the batch order is
shuffled. The remainder of a bucket that cannot fill a batch is dropped for that epoch (which
samples, is random per epoch, so none is dropped for good unless the whole bucket is smaller than
a batch); the plan counts them so the page can show it.

Augmentation follows OneTrainer. Without latent caching every epoch draws a fresh crop, flip,
rotation and colour change. A cached latent cannot be re-augmented, so with caching each image has
``image_variations`` variants, each a seeded draw of crop, rotation and colour made once at caching
time (seeded by the concept seed, not the run seed, so a new run reuses the cache); each showing of
an image takes the next of its variations, in its own seeded order (one per epoch with Balancing 1;
two in an epoch with REPEATS 2, as MGDS gives each round of its walk the next one). Random flip is the
exception: both flip states of every variation are cached, so the flip stays a per-epoch coin toss.
With masked training the mask augmentations (mask_augment.py) are drawn first, from a stream of their
own; a rotate-and-crop cut is what is bucketed and cropped, as in OneTrainer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .augment import IDENTITY, Augment, AugmentSettings
from .balancing import concept_balancing, epoch_showings
from .buckets import Bucketing, Size
from .captions import pick_line
from .mask_augment import MaskAugmentSettings, MaskDraw, mask_grid
from .scan import ConceptScan, ImageItem
from .seeding import Streams, rng_for
from .tags import TextAugment
from .transform import CropBox, choose_crop


@dataclass(frozen=True)
class Variant:
    """One way an image is fitted to a bucket and augmented; the unit the latent cache stores."""

    resolution: Size
    bucket: Size
    crop: CropBox
    flip: bool
    augment: Augment = IDENTITY
    frames: int = 0  # the item's frame count (0: an image of an image family); batches share it
    clip_offset: float = 0.0  # a clip's window starts this many seconds after the run's clip start (random clip window)


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
    bucketing: Bucketing = field(default_factory=Bucketing)
    text: TextAugment = field(default_factory=TextAugment)
    masked: bool = False  # masked training: the mask augmentations apply
    augment: AugmentSettings = field(init=False, repr=False)
    mask_augment: MaskAugmentSettings = field(init=False, repr=False)
    _buckets: dict[tuple[int, Size], Size] = field(default_factory=dict, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        image = getattr(self.config, "image", None)
        self.augment = AugmentSettings.from_config(image)
        smallest = min((side for size in self.resolutions for side in size), default=512)
        self.mask_augment = MaskAugmentSettings.from_config(image, self.masked, smallest)

    @property
    def items(self) -> list[ImageItem]:
        return self.scan.items

    @property
    def seed(self) -> int:
        return int(getattr(self.config, "seed", 0))

    @property
    def loss_weight(self) -> float:
        return float(getattr(self.config, "loss_weight", 1.0))

    @property
    def prior_prediction(self) -> bool:
        """A PRIOR_PREDICTION concept: its images train towards the base model's prediction."""
        return str(getattr(self.config, "type", "STANDARD")) == "PRIOR_PREDICTION"

    @property
    def variations(self) -> int:
        """Distinct cached variants per image and flip; 1 when nothing random would tell them apart."""
        if "variations" not in self._memo:
            random = self._image_option("enable_crop_jitter") or self.augment.random or (
                self.mask_augment.active and self.scan.mask_count > 0) or any(self._window_moves(i) for i in range(len(self.items)))
            self._memo["variations"] = max(1, int(getattr(self.config, "image_variations", 1))) if random else 1
        return self._memo["variations"]

    def _image_option(self, name: str) -> bool:
        return bool(getattr(getattr(self.config, "image", None), name, False))

    def bucket(self, index: int, resolution: Size, draw: MaskDraw | None = None) -> Size:
        """The bucket of the image, or of its rotate-and-crop cut when `draw` has one."""
        width, height = self.size(index, draw)
        key = (index, resolution) if draw is None or draw.box is None else (index, resolution, width, height)
        if key not in self._buckets:
            self._buckets[key] = self.bucketing.assign(width, height, resolution)
        return self._buckets[key]

    def size(self, index: int, draw: MaskDraw | None = None) -> tuple[int, int]:
        """(width, height) of the image as it is bucketed: its rotate-and-crop cut, if any."""
        item = self.items[index]
        return (item.width, item.height) if draw is None else draw.size(item.width, item.height)

    def mask_draw(self, index: int, streams: Callable[[str], random.Random]) -> MaskDraw | None:
        """The mask augmentations' draw for an image with a mask file (None: none apply), from the
        streams "mask shrink" and "mask crop"."""
        item = self.items[index]
        if not self.mask_augment.active or item.mask_path is None:
            return None
        key = ("mask grid", index)
        if key not in self._memo:
            self._memo[key] = mask_grid(item.mask_path, item.width, item.height, alpha=item.mask_from_alpha)
        return self.mask_augment.draw(self._memo[key], item.width, item.height, streams("mask shrink"), streams("mask crop"))

    def cached_mask_draw(self, index: int, variation: int) -> MaskDraw | None:
        key = ("mask", index, variation)
        if key not in self._memo:
            relpath = self.items[index].relpath
            self._memo[key] = self.mask_draw(index, lambda name: rng_for(name, self.seed, relpath, variation))
        return self._memo[key]

    def flips(self) -> tuple[bool, ...]:
        """Flip states an epoch can use: a random flip wins over a fixed one, as in OneTrainer."""
        if self._image_option("enable_random_flip"):
            return (False, True)
        if self._image_option("enable_fixed_flip"):
            return (True,)
        return (False,)

    def cached_crop(self, index: int, resolution: Size, variation: int = 0) -> CropBox:
        """The crop of one cached variation (variation 0 keeps the key older caches used)."""
        key = ("crop", index, resolution, variation)
        if key not in self._memo:
            item = self.items[index]
            rng = None
            if self._image_option("enable_crop_jitter"):
                parts = (self.seed, item.relpath, resolution) + ((variation,) if variation else ())
                rng = rng_for("crop", *parts)
            draw = self.cached_mask_draw(index, variation)
            self._memo[key] = choose_crop(*self.size(index, draw), self.bucket(index, resolution, draw), rng)
        return self._memo[key]

    def _window_moves(self, index: int) -> bool:
        item = self.items[index]
        return item.sampling is not None and item.sampling.random_window and item.slack > 0

    def clip_offset(self, index: int, rng: random.Random) -> float:
        """Where a clip's window starts in one draw, in seconds after the run's clip start (0: an
        image, a clip with nothing to spare, or the random clip window off); millisecond steps."""
        return round(rng.random() * self.items[index].slack, 3) if self._window_moves(index) else 0.0

    def cached_clip_offset(self, index: int, variation: int) -> float:
        return self.clip_offset(index, rng_for("clip window", self.seed, self.items[index].relpath, variation))

    def cached_augment(self, index: int, variation: int) -> Augment:
        key = ("augment", index, variation)
        if key not in self._memo:
            augment = self.augment.draw(rng_for("augment", self.seed, self.items[index].relpath, variation))
            draw = self.cached_mask_draw(index, variation)
            self._memo[key] = augment if draw is None else replace(augment, mask=draw)
        return self._memo[key]

    def variation(self, index: int, showing: int, run_seed: int) -> int:
        """The cached variation of an image's ``showing``-th showing (balancing.epoch_showings; the
        epoch number when each image is shown once an epoch): each image walks its own seeded order
        of all variations, the next one at each showing, so every variation is used once per
        ``variations`` showings, and an image shown twice in an epoch (Balancing 2) is shown in two
        variations, as MGDS's cache gives each round of its walk the next variation."""
        return self._walk("variation", index, showing, run_seed, self.variations)

    def balance_order(self, run_seed: int, position: int, round_: int) -> list[int]:
        """The order of round `round_` of balancing's walk through this concept's images
        (balancing.py): shuffled by the run seed, the concept seed, the concept's place in the list
        and the round. OneTrainer walks in sorted file order every round; a seeded order per round
        keeps a fraction (REPEATS 0.5, SAMPLES below the image count) from taking one range of file
        names first, and from pairing the same images in every round."""
        key = ("balance order", run_seed, position, round_)
        if key not in self._memo:
            order = list(range(len(self.items)))
            rng_for("balance order", run_seed, self.seed, position, round_).shuffle(order)
            self._memo[key] = order
        return self._memo[key]

    def _walk(self, kind: str, index: int, showing: int, run_seed: int, count: int) -> int:
        if count <= 1:
            return 0
        key = (kind, index, run_seed)
        if key not in self._memo:
            order = list(range(count))
            rng_for(kind, run_seed, self.seed, self.items[index].relpath).shuffle(order)
            self._memo[key] = order
        return self._memo[key][showing % count]

    @property
    def text_variations(self) -> int:
        """OneTrainer's text_variations: when this concept's captions are drawn at random (tag
        shuffling, tag dropout, capitalisation), each image's caption is one of this many fixed
        draws, the next one at each showing of the image in a seeded order, so their text encoder outputs can be
        cached (data/text_cache.py). 0 when the concept asks for 1 (a fresh draw every epoch) or
        draws nothing at random."""
        count = int(getattr(self.config, "text_variations", 1) or 1)
        return count if count > 1 and self.text.random else 0

    def caption_variant(self, index: int, variation: int, run_seed: int) -> str:
        """The image's caption in text variation `variation`: the same text whenever it is asked for."""
        rngs = Streams("text-variation", run_seed, self.seed, self.items[index].relpath, variation)
        return self.text.apply(pick_line(self.items[index].captions, rngs["caption"]), rngs)

    def cached_variants(self, index: int) -> list[Variant]:
        """Every variant of one image any epoch can ask for with latent caching on."""
        out: dict[Variant, None] = {}
        for resolution in self.resolutions:
            for variation in range(self.variations):
                bucket = self.bucket(index, resolution, self.cached_mask_draw(index, variation))
                crop = self.cached_crop(index, resolution, variation)
                augment = self.cached_augment(index, variation)
                offset = self.cached_clip_offset(index, variation)
                for flip in self.flips():
                    out[Variant(resolution, bucket, crop, flip, augment, self.items[index].frames, offset)] = None
        return list(out)

    def variant(self, index: int, resolution: Size, rngs: Streams, cached: bool, showing: int = 0, run_seed: int = 0) -> Variant:
        item = self.items[index]
        flips = self.flips()
        flip = flips[0] if len(flips) == 1 else rngs["flip"].random() < 0.5
        if cached:
            variation = self.variation(index, showing, run_seed)
            bucket = self.bucket(index, resolution, self.cached_mask_draw(index, variation))
            return Variant(resolution, bucket, self.cached_crop(index, resolution, variation), flip, self.cached_augment(index, variation),
                           item.frames, self.cached_clip_offset(index, variation))
        draw = self.mask_draw(index, rngs.__getitem__)
        bucket = self.bucket(index, resolution, draw)
        jitter = rngs["crop"] if self._image_option("enable_crop_jitter") else None
        crop = choose_crop(*self.size(index, draw), bucket, jitter)
        augment = self.augment.draw(rngs["augment"])
        offset = self.clip_offset(index, rngs["clip window"]) if self._window_moves(index) else 0.0
        return Variant(resolution, bucket, crop, flip, augment if draw is None else replace(augment, mask=draw), item.frames, offset)

    def caption(self, index: int, rngs: Streams, showing: int = 0, run_seed: int = 0) -> str:
        if count := self.text_variations:
            return self.caption_variant(index, self._walk("text-variation", index, showing, run_seed, count), run_seed)
        return self.text.apply(pick_line(self.items[index].captions, rngs["caption"]), rngs)


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
    groups: dict[tuple[Size, int], list[Sample]] = {}  # by bucket and frame count
    count = 0
    for ci, concept in enumerate(concepts):
        rngs = Streams(seed, concept.seed, ci, epoch)
        balancing, strategy = concept_balancing(concept.config)
        # `showing`: the image's showings before this sample, which picks its cached image and text variation
        for index, showing in epoch_showings(len(concept.items), balancing, strategy, epoch,
                                             lambda round_, concept=concept, ci=ci: concept.balance_order(seed, ci, round_)):
            resolutions = concept.resolutions
            resolution = resolutions[0] if len(resolutions) == 1 else rngs["resolution"].choice(resolutions)
            variant = concept.variant(index, resolution, rngs, cached, showing, seed)
            groups.setdefault((variant.bucket, variant.frames), []).append(Sample(ci, index, variant, concept.caption(index, rngs, showing, seed)))
            count += 1

    rng_batch = rng_for("batches", seed, epoch)
    batches: list[list[Sample]] = []
    dropped: dict[Size, int] = {}
    for bucket, frames in sorted(groups):
        group = groups[bucket, frames]
        rng_batch.shuffle(group)
        full = len(group) - len(group) % batch_size
        if full < len(group):
            dropped[bucket] = dropped.get(bucket, 0) + len(group) - full
        batches.extend(group[k : k + batch_size] for k in range(0, full, batch_size))
    rng_batch.shuffle(batches)
    return EpochPlan(epoch, batches, dropped, count)
