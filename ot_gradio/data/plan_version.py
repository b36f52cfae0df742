"""The version of the data plan: which images an epoch trains, in which aspect bucket, with which
cached variation. The plan is computed from the epoch number and the seed, so a backup written
inside an epoch continues exactly only with the plan that drew its epoch's first part. Backups
record PLAN_VERSION in their marker (training/backup.py); a backup of another version stopped
inside an epoch is said on resume (training/resume_plan.py), naming the changes below that can
matter for the run's config. Raise PLAN_VERSION and add a line to HISTORY with every change of the
plan; a change that alters no plan needs neither.

The rules read a config's JSON (the run's, or the older one a backup holds), a missing setting
counting as its default, so a backup's config of an earlier version is read as it stands."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..config.concept import ConceptConfig
from ..config.schema import TrainConfig


@dataclass(frozen=True)
class PlanChange:
    """What version `version` changed from the one before, and in words which configs it affects
    (`affects`); `applies`: whether it can matter for a config (its JSON)."""

    version: int
    what: str
    affects: str
    applies: Callable[[dict[str, Any]], bool]


def _default(model: Any, name: str) -> Any:
    default = model.model_fields[name].default
    return getattr(default, "value", default)


def _get(config: dict[str, Any], model: Any, name: str) -> Any:
    value = config.get(name, _default(model, name)) if isinstance(config, dict) else _default(model, name)
    return getattr(value, "value", value)


def _number(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _concepts(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The enabled concepts (validation ones too: the plan draws them alike)."""
    found = config.get("concepts") if isinstance(config, dict) else None
    return [c for c in found or [] if isinstance(c, dict) and _get(c, ConceptConfig, "enabled")]


def _balancing(concept: dict[str, Any]) -> tuple[float, str]:
    return (_number(_get(concept, ConceptConfig, "balancing"), 1.0),
            str(_get(concept, ConceptConfig, "balancing_strategy") or "REPEATS"))


def _bucketing(config: dict[str, Any]) -> bool:
    return bool(_get(config, TrainConfig, "aspect_ratio_bucketing"))


def _fractional_balancing(config: dict[str, Any]) -> bool:
    """SAMPLES, or REPEATS of a fraction (whole REPEATS draw the lists earlier versions drew)."""
    return any(strategy == "SAMPLES" or not b.is_integer() for b, strategy in map(_balancing, _concepts(config)))


def _showing_variations(config: dict[str, Any]) -> bool:
    """Cached image variations, or text variations, of a concept whose images are not shown once
    an epoch (REPEATS 1): their k-th showing, no longer the epoch, picks the variation."""
    cached = bool(_get(config, TrainConfig, "latent_caching"))

    def varied(concept: dict[str, Any]) -> bool:
        image = cached and _number(_get(concept, ConceptConfig, "image_variations"), 1) > 1
        return image or _number(_get(concept, ConceptConfig, "text_variations"), 1) > 1

    return any(varied(c) and _balancing(c) != (1.0, "REPEATS") for c in _concepts(config))


HISTORY: tuple[PlanChange, ...] = (
    PlanChange(1, "aspect buckets are OneTrainer's (its quantization per model, the nearest bucket by linear aspect, a lone "
                  "WxH resolution one fixed size) and kohya's buckets are picked as sd-scripts' select_bucket",
               "aspect bucketing on", _bucketing),
    PlanChange(2, "balancing counts floor(images x Balancing) samples for REPEATS and int(Balancing) for SAMPLES, and takes "
                  "the images beyond whole repeats in seeded rounds",
               "fractional REPEATS or SAMPLES balancing", _fractional_balancing),
    PlanChange(3, "each showing of an image takes its next cached image variation and text variation (an image shown "
                  "several times in one epoch takes a new one each time; one shown every other epoch, the next one), not "
                  "the epoch's",
               "latent caching with image_variations > 1, or text_variations > 1, and Balancing other than REPEATS 1",
               _showing_variations),
)
PLAN_VERSION = HISTORY[-1].version


def plan_of(marker: dict[str, Any] | None) -> int:
    """The plan version a backup's marker records: 0 for a backup written before markers held it."""
    plan = (marker or {}).get("plan")
    return plan if isinstance(plan, int) and not isinstance(plan, bool) and plan >= 0 else 0


def changes_since(version: int, configs: Iterable[dict[str, Any]]) -> list[PlanChange]:
    """The changes after `version` up to PLAN_VERSION that can matter for any of `configs`."""
    configs = list(configs)
    return [c for c in HISTORY if c.version > version and any(c.applies(config) for config in configs)]
