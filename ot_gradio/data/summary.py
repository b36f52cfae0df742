"""Plain-data summary of a dataset for the page and the run report; no torch.

Bucket labels are "WxH" (width first, as image editors and the page show sizes). Per concept:
``buckets`` counts images per bucket (with several resolutions an image counts once for each
bucket it can land in), and ``never_trained`` lists the images whose every bucket can never hold
a full batch in any epoch, so they are always dropped. That uses an upper bound: each image at its
most frequent (balancing.py: ``k // n`` times, plus one when ``k % n`` is not 0, for a concept of
``n`` images giving ``k`` samples per epoch), so an image listed is certain never to train,
whatever the epoch draws. A concept whose balancing gives no sample at all is not listed there:
its warning (balancing.zero_samples_warning, in ``warnings``) names it and the setting.
``batch_size`` is the number of samples that must share a bucket in one step; with gradient
accumulation that is still the batch size, not the product. ``image_variations`` is how many distinct variants per image (and
flip state) latent caching encodes: 1 when nothing random (crop jitter, random rotation or colour)
would tell them apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .balancing import concept_balancing, max_repeats
from .buckets import Bucketing, Size
from .planning import EpochPlan, PreparedConcept, plan_epoch
from .prepare import prepare_concepts


def bucket_label(bucket: Size) -> str:
    height, width = bucket
    return f"{width}x{height}"


def _by_aspect(counts: dict[Size, int]) -> dict[str, int]:
    return {bucket_label(b): counts[b] for b in sorted(counts, key=lambda s: (s[0] / s[1], s))}


def _image_buckets(concept: PreparedConcept, index: int) -> set[Size]:
    return {concept.bucket(index, r) for r in concept.resolutions}


def never_trained(concepts: Sequence[PreparedConcept], batch_size: int) -> list[list[tuple[int, set[Size]]]]:
    """Per concept, (image index, its buckets) of the images that can never be in a full batch."""
    most: Counter[Size] = Counter()  # most samples a bucket can get in one epoch
    for concept in concepts:
        repeats = max_repeats(len(concept.items), *concept_balancing(concept.config))
        for index in range(len(concept.items)):
            for bucket in _image_buckets(concept, index):
                most[bucket] += repeats
    out = []
    for concept in concepts:
        lost: list[tuple[int, set[Size]]] = []
        out.append(lost)
        if not max_repeats(len(concept.items), *concept_balancing(concept.config)):
            continue  # never sampled at all: its balancing warning says so, not its bucket
        for index in range(len(concept.items)):
            buckets = _image_buckets(concept, index)
            if all(most[b] < batch_size for b in buckets):
                lost.append((index, buckets))
    return out


def summarize(
    concepts: Sequence[PreparedConcept],
    plan: EpochPlan,
    batch_size: int,
    cache_report: object | None = None,
    warnings: Sequence[str] = (),
) -> dict:
    lost = never_trained(concepts, batch_size)
    rows = []
    for concept, lost_items in zip(concepts, lost, strict=True):
        buckets: Counter[Size] = Counter()
        for index in range(len(concept.items)):
            buckets.update(_image_buckets(concept, index))
        rows.append(
            {
                "name": concept.scan.name,
                "folder": str(concept.scan.folder),
                "images": len(concept.items),
                "skipped": [{"path": str(s.path), "reason": s.reason} for s in concept.scan.skipped],
                "uncaptioned": len(concept.scan.uncaptioned),
                "masks": concept.scan.mask_count,
                "transparent": len(concept.scan.transparent),  # images with transparent pixels: they train on white
                "resolutions": [list(r) for r in concept.resolutions],
                "image_variations": concept.variations,
                "buckets": _by_aspect(buckets),
                "never_trained": [
                    {"path": str(concept.items[index].path), "buckets": sorted(bucket_label(b) for b in item_buckets)}
                    for index, item_buckets in lost_items
                ],
            }
        )
    return {
        "concepts": rows,
        "batch_size": int(batch_size),
        "samples_per_epoch": plan.sample_count,
        "steps_per_epoch": len(plan.batches),
        "dropped_samples": plan.dropped_samples,
        "dropped_by_bucket": _by_aspect(plan.dropped),
        "never_trained": sum(len(x) for x in lost),
        "cache": None if cache_report is None else vars(cache_report).copy(),
        "warnings": list(warnings),
    }


def dataset_summary(
    concepts: Sequence[object],
    resolutions: str | Sequence[Size] = "512",
    batch_size: int = 1,
    *,
    bucketing: Bucketing = Bucketing(),
    latent_caching: bool = False,
    seed: int = 42,
    masked_training: bool = False,
) -> dict:
    """The summary ``TrainingDataset.summary()`` gives, without building a dataset or importing
    torch: for the page, before training. Raises DataError like ``build_dataset``, except that a
    batch size larger than every bucket is shown (0 steps) instead of raised."""
    prepared, warnings = prepare_concepts(concepts, resolutions, bucketing=bucketing, masked_training=masked_training)
    plan = plan_epoch(prepared, 0, int(seed), max(1, int(batch_size)), cached=latent_caching)
    return summarize(prepared, plan, max(1, int(batch_size)), warnings=warnings)
