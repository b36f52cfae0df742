"""Concepts -> images, captions, masks -> augmentation, buckets -> cached latents or pixels -> batches.

Never writes into a dataset folder; only the latent cache folder is written.

Names load on first use, so the page can call ``dataset_summary`` or the scan without importing
torch; building a dataset (``build_dataset``) brings torch in.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .batches import Batch
    from .buckets import assign_bucket, bucket_sizes, bucket_step
    from .caching import CacheReport
    from .dataset import EpochBatches, TrainingDataset, build_dataset
    from .demo import ensure_demo_concepts, ensure_demo_dataset
    from .errors import DataError
    from .latent_cache import LatentCache, cache_key
    from .scan import ConceptScan, ImageItem, SkippedFile, scan_concept
    from .summary import dataset_summary

_WHERE = {
    "Batch": "batches",
    "CacheReport": "caching",
    "ConceptScan": "scan",
    "DataError": "errors",
    "EpochBatches": "dataset",
    "ImageItem": "scan",
    "LatentCache": "latent_cache",
    "SkippedFile": "scan",
    "TrainingDataset": "dataset",
    "assign_bucket": "buckets",
    "bucket_sizes": "buckets",
    "bucket_step": "buckets",
    "build_dataset": "dataset",
    "cache_key": "latent_cache",
    "dataset_summary": "summary",
    "ensure_demo_concepts": "demo",
    "ensure_demo_dataset": "demo",
    "scan_concept": "scan",
}

__all__ = [
    "Batch",
    "CacheReport",
    "ConceptScan",
    "DataError",
    "EpochBatches",
    "ImageItem",
    "LatentCache",
    "SkippedFile",
    "TrainingDataset",
    "assign_bucket",
    "bucket_sizes",
    "bucket_step",
    "build_dataset",
    "cache_key",
    "dataset_summary",
    "ensure_demo_concepts",
    "ensure_demo_dataset",
    "scan_concept",
]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
