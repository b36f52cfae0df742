"""Concepts -> images, captions, masks -> buckets -> cached latents or pixels -> batches.

Never writes into a dataset folder; only the latent cache folder is written.
"""

from .batches import Batch
from .buckets import assign_bucket, bucket_sizes, bucket_step
from .caching import CacheReport
from .dataset import EpochBatches, TrainingDataset, build_dataset
from .demo import ensure_demo_concepts, ensure_demo_dataset
from .errors import DataError
from .latent_cache import LatentCache, cache_key
from .scan import ConceptScan, ImageItem, SkippedFile, scan_concept

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
    "ensure_demo_concepts",
    "ensure_demo_dataset",
    "scan_concept",
]
