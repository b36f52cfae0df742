"""Scan the enabled concepts and check their settings, without touching torch.

Shared by ``build_dataset`` (which then caches and trains) and ``dataset_summary`` (which the
page calls to show buckets before any training starts).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..config.resolution import parse_resolutions
from .balancing import concept_balancing, zero_samples_warning
from .buckets import Bucketing, Size
from .errors import DataError
from .planning import PreparedConcept
from .scan import concept_label, scan_concept
from .tags import TextAugment
from .video import FrameSampling

log = logging.getLogger(__name__)


def resolution_list(value: str | Sequence[Size]) -> list[Size]:
    """A resolution string ("512", "768x512", "384,448,512") or (h, w) pairs -> (h, w) pairs."""
    if isinstance(value, str):
        try:
            return parse_resolutions(value)
        except ValueError as exc:
            raise DataError(f"resolution: {exc}") from None
    return [(int(h), int(w)) for h, w in value]


def concept_resolutions(concept: object, default: list[Size]) -> list[Size]:
    """The concept's resolution override (a single size or a list) when enabled, else ``default``."""
    image = getattr(concept, "image", None)
    if image is None or not getattr(image, "enable_resolution_override", False):
        return default
    try:
        return parse_resolutions(getattr(image, "resolution_override", ""))
    except ValueError as exc:
        raise DataError(f"Concept '{concept_label(concept)}': resolution override: {exc}") from None


def prepare_concepts(
    concepts: Sequence[object],
    resolutions: str | Sequence[Size] = "512",
    *,
    bucketing: Bucketing = Bucketing(),
    frames: FrameSampling | None = None,
    control: bool = False,
    depth: bool = False,
    masked_training: bool = False,
    condlabel: bool = False,
    held_out: bool = False,
) -> tuple[list[PreparedConcept], list[str]]:
    """(prepared concepts, warnings). Every problem of every concept is collected into one
    DataError, so a user fixes them all in one go. A concept whose balancing gives no sample per
    epoch (balancing.py) is warned about, not refused, as OneTrainer takes it. ``frames``: a video
    family's frame sampling (clips are training items too); ``control``: each image pairs with its
    `-control` image; ``depth``: an image's `-depth` map is its depth map (data/scan.py);
    ``masked_training``: the concepts' mask augmentations apply (mask_augment.py); ``condlabel``:
    an image's `-condlabel` image is its conditioning image (custom_conditioning_image); ``held_out``:
    the validation set's concepts (its warnings say validated, not trained);
    ``bucketing``: how images are bucketed (buckets.Bucketing)."""
    default = resolution_list(resolutions)
    warnings: list[str] = []
    prepared: list[PreparedConcept] = []
    errors: list[str] = []
    for concept in concepts:
        if not getattr(concept, "enabled", True):
            continue
        label = concept_label(concept)
        kind = str(getattr(concept, "type", "STANDARD"))
        if kind == "VALIDATION":
            continue  # held out: never trained (training/validation.py computes its loss)
        if kind not in ("STANDARD", "PRIOR_PREDICTION"):  # PRIOR_PREDICTION: trained, with the base model's target (diffusion.py)
            warnings.append(f"Concept '{label}' is a {kind} concept, which is not supported yet; it is not trained")
            log.warning(warnings[-1])
            continue
        try:
            concept_res = concept_resolutions(concept, default)
            scan = scan_concept(concept, frames, control, depth, condlabel)
        except DataError as exc:
            errors.append(str(exc))
            continue
        try:
            text = TextAugment.from_config(getattr(concept, "text", None), scan.folder)
        except DataError as exc:
            errors.append(f"Concept '{label}': {exc}")
            continue
        warnings.extend(scan.warnings)
        if note := zero_samples_warning(label, len(scan.items), *concept_balancing(concept),
                                        held_out=held_out):
            warnings.append(note)
            log.warning(note)
        prepared.append(PreparedConcept(concept, scan, concept_res, bucketing, text, masked_training))
    if errors:
        raise DataError("\n".join(errors))
    if not prepared:
        raise DataError("no enabled concept to train on: add a concept folder or enable one")
    return prepared, warnings
