"""The dataset the trainer uses: scan concepts, fill the latent cache, hand out epochs of batches.

``build_dataset`` does all checks and the caching phase before returning, so every data problem
(missing folder, no readable image, batch size larger than every bucket) is a ``DataError`` before
the first step. ``epoch_batches(epoch)`` is deterministic given the seed and the epoch, and loads
each batch only when it is indexed: a whole epoch of pixels is never in memory, and a resumed run
continues with ``epoch_batches(epoch)[step:]``-style indexing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config.concept import ConceptConfig
from .balancing import concept_balancing, zero_samples_warning
from .batches import Batch, make_batch
from .buckets import Bucketing, Size
from .caching import CacheReport, ConditioningFn, EncodeFn, ProgressFn, fill_cache
from .errors import DataError
from .latent_cache import LatentCache
from .planning import EpochPlan, PreparedConcept, plan_epoch
from .prepare import prepare_concepts
from .scan import concept_label
from .seeding import Streams
from .summary import summarize
from .video import FrameSampling

# epochs looked at for one that fills a batch, when the first does not (plans are cheap: no image is read)
FILL_CHECK_EPOCHS = 64


class EpochBatches(Sequence):
    """The batches of one epoch, in training order; each is loaded when indexed. `shard` picks
    this process's share of each (global) batch in a multi-GPU run, before anything is loaded."""

    def __init__(self, dataset: TrainingDataset, plan: EpochPlan, shard: Callable[[list], list] | None = None):
        self.dataset = dataset
        self.plan = plan
        self.shard = shard

    def __len__(self) -> int:
        return len(self.plan.batches)

    def __getitem__(self, index: int) -> Batch:  # type: ignore[override]
        if isinstance(index, slice):
            raise TypeError("index one batch at a time; iterate from a step with range()")
        dataset = self.dataset
        samples = self.plan.batches[index]
        if self.shard is not None:
            samples = self.shard(samples)
        return make_batch(samples, dataset.concepts, dataset.cache, dataset.cached_conditioning)

    def __iter__(self) -> Iterator[Batch]:
        for index in range(len(self)):
            yield self[index]

    @property
    def dropped_samples(self) -> int:
        return self.plan.dropped_samples


@dataclass
class TrainingDataset:
    concepts: list[PreparedConcept]
    batch_size: int
    seed: int
    cache: LatentCache | None = None
    cache_report: CacheReport | None = None
    cached_conditioning: str = ""  # the kind of conditioning the cache holds too ("masked_image", "depth"; "": none)
    warnings: list[str] = field(default_factory=list)
    _steps: dict[int, int] = field(default_factory=dict, repr=False)

    def plan(self, epoch: int) -> EpochPlan:
        return plan_epoch(self.concepts, epoch, self.seed, self.batch_size, cached=self.cache is not None)

    def epoch_batches(self, epoch: int, shard: Callable[[list], list] | None = None) -> EpochBatches:
        plan = self.plan(epoch)
        self._steps[epoch] = len(plan.batches)
        return EpochBatches(self, plan, shard)

    def steps_in_epoch(self, epoch: int) -> int:
        if epoch not in self._steps:
            self._steps[epoch] = len(self.plan(epoch).batches)
        return self._steps[epoch]

    @property
    def steps_per_epoch(self) -> int:
        """Steps of epoch 0 (of the first epoch with any, where epoch 0 fills no batch). The samples
        per epoch are the same every epoch (balancing.py), but with several resolutions, fractional
        balancing or SAMPLES below a concept's image count, which images an epoch has (and so the
        bucket remainders and the step count) can vary a little per epoch: use ``steps_in_epoch`` /
        ``total_steps`` for exact numbers."""
        return next((steps for e in range(FILL_CHECK_EPOCHS) if (steps := self.steps_in_epoch(e))), 0)

    def total_steps(self, epochs: int) -> int:
        return sum(self.steps_in_epoch(e) for e in range(epochs))

    def dropped_samples(self, epoch: int) -> int:
        return self.plan(epoch).dropped_samples

    def captions(self) -> list[str]:
        """Every caption an epoch can give, each once: each caption line of each image after its
        concept's text options. Exact when those options draw nothing at random or the concept has
        text variations (as when the text encoder outputs are cached); otherwise, with tag
        shuffling or dropout on, a sample's caption is one draw of many and this lists one draw per line."""
        out: dict[str, None] = {}
        for ci, concept in enumerate(self.concepts):
            if count := concept.text_variations:  # exact: every variant any epoch draws
                for index in range(len(concept.items)):
                    out.update((concept.caption_variant(index, v, self.seed), None) for v in range(count))
                continue
            rngs = Streams(self.seed, concept.seed, ci, 0)
            for item in concept.items:
                for line in item.captions or ("",):
                    out[concept.text.apply(line, rngs)] = None
        return list(out)

    @property
    def has_masks(self) -> bool:
        return any(c.scan.mask_count for c in self.concepts)

    def summary(self, batch_size: int | None = None) -> dict:
        """Plain data for the page and the run report (see ``summary``); ``batch_size`` defaults
        to the dataset's."""
        size = self.batch_size if batch_size is None else max(1, int(batch_size))
        plan = self.plan(0) if size == self.batch_size else plan_epoch(self.concepts, 0, self.seed, size, cached=self.cache is not None)
        return summarize(self.concepts, plan, size, self.cache_report, self.warnings)


def build_dataset(
    concepts: Sequence[ConceptConfig],
    resolutions: str | Sequence[Size] = "512",
    batch_size: int = 1,
    *,
    bucketing: Bucketing = Bucketing(),
    latent_caching: bool = False,
    cache_dir: str | Path | None = None,
    vae_id: str = "",
    seed: int = 42,
    encode_fn: EncodeFn | None = None,
    encode_batch_size: int = 4,
    progress: ProgressFn | None = None,
    clear_cache: bool = False,
    conditioning_fn: ConditioningFn | None = None,
    conditioning_kind: str = "masked_image",
    threads: int = 0,
    frames: FrameSampling | None = None,
    control: bool = False,
    depth: bool = False,
    masked_training: bool = False,
    condlabel: bool = False,
    nonfinite_hint: str = "",
    held_out: bool = False,
) -> TrainingDataset:
    """Scan the enabled concepts, fill the latent cache (with ``latent_caching``) and return the
    dataset. ``resolutions`` is a resolution string ("512", "384,448,512") or (h, w) pairs;
    latents are stored under ``<cache_dir>/latents``; ``progress(done, total)`` reports caching;
    ``clear_cache`` empties the cache first (OneTrainer's "clear cache before training");
    ``conditioning_fn(pixels, mask)`` caches the masked-image latents of images with a mask too
    (inpainting models with masked training; ``conditioning_kind`` "depth": every image's depth map),
    which the batches then carry; ``threads``: image
    decoding and latent writing threads while caching (`dataloader_threads`); ``frames``: a video
    family's frame sampling (clips are items, pixels [3, frames, H, W]); ``control``: an
    image-conditioned family (each image with its `-control` image, batches carry both); ``depth``:
    a depth model (an image's `-depth` map is its depth map, data/scan.py); ``masked_training``: the
    concepts' mask augmentations apply (mask_augment.py); ``condlabel``: an inpainting model's
    `-condlabel` images are the conditioning images of their images (custom_conditioning_image);
    ``nonfinite_hint``: what the DataError says to do when the VAE makes NaN or inf latents (the
    trainer's: the VAE's type and the setting to change); ``bucketing``: how images are bucketed
    (buckets.Bucketing: aspect ratio bucketing, the model's step, kohya's step and no-upscale)."""
    if batch_size < 1:
        raise DataError(f"batch size must be at least 1, not {batch_size}")
    if latent_caching and (cache_dir is None or encode_fn is None):
        raise ValueError("latent caching needs cache_dir and encode_fn")
    prepared, warnings = prepare_concepts(concepts, resolutions, bucketing=bucketing, frames=frames, control=control, depth=depth,
                                          masked_training=masked_training, condlabel=condlabel, held_out=held_out)
    cache = LatentCache(Path(cache_dir) / "latents", vae_id, nonfinite_hint) if latent_caching else None
    dataset = TrainingDataset(prepared, int(batch_size), int(seed), cache=cache, warnings=warnings)
    first = dataset.plan(0)
    if not first.sample_count:  # every concept's balancing rounds down to 0 samples, in every epoch
        notes = (zero_samples_warning(concept_label(c.config), len(c.items), *concept_balancing(c.config), held_out=held_out)
                 for c in prepared)
        raise DataError("no concept gives a sample per epoch (each one's Balancing rounds down to 0), so there is nothing "
                        "to use:\n" + "\n".join(n for n in notes if n))
    # an epoch of a few samples (SAMPLES 2 across two buckets) may fill no batch where later ones do:
    # the trainer says which of its epochs train no step; none in FILL_CHECK_EPOCHS is refused
    if not first.batches and not any(dataset.steps_in_epoch(e) for e in range(1, FILL_CHECK_EPOCHS)):
        raise DataError(
            f"batch size {batch_size} is larger than every bucket: the {first.sample_count} samples of an epoch "
            f"fall into buckets of {sorted(first.dropped.values(), reverse=True)} samples (in each of the first "
            f"{FILL_CHECK_EPOCHS} epochs); lower the batch size, "
            "raise balancing or turn aspect ratio bucketing off"
        )
    if cache is not None:
        if clear_cache:
            cache.clear()
        dataset.cache_report = fill_cache(prepared, cache, encode_fn, encode_batch_size, progress, conditioning_fn, threads, conditioning_kind)
        dataset.cached_conditioning = conditioning_kind if conditioning_fn is not None else ""
    return dataset
