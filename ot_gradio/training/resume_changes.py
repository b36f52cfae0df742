"""What a continued run does differently from the backup it continues, said in its warnings: the
settings that reach the training step and may change between the backup and this run (a LoRA
dropout added against overfitting, another loss, another EMA decay) apply from the resumed step on,
and the run says which, with both values, so a result that changed has a visible cause.

Not listed here: the settings a backup must share (`backup_must_match`: refused before, resume.py),
the optimizer and learning-rate schedule (resume_optimizer.py says those), the concepts (resume.py
says their folders), the samples and the settings that change speed or memory only.

The seed is said on its own line when the backup stopped inside an epoch: the backup's random state
continues (noise, timesteps), but the order of the epoch's images is drawn from the seed, so the
rest of that epoch is another order than the one it began with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config.families import family_info
from ..config.fields import field_meta, iter_fields
from ..config.parts import ModelPartConfig
from ..config.schema import TrainConfig
from .backup import Counters
from .resume_optimizer import LEAD, SCHEDULE_KEYS, plain

UNSET = object()

# settings of speed and memory only (the same training, done faster or in less memory)
_SPEED_ONLY = {"multi_gpu", "device_indexes", "gradient_reduce_precision", "fused_gradient_reduce", "async_gradient_reduce",
               "async_gradient_reduce_buffer", "train_device", "temp_device", "async_offloading", "compile",
               "enable_autocast_cache", "attention_mechanism", "lokr_vec_trick", "quantization.cache_dir"}
_SPEED_ONLY_OF_A_PART = ("gradient_checkpointing", "offload_fraction", "activation_offloading")
# said elsewhere: the optimizer and schedule (resume_optimizer.py), a part left out (resume.py), lists of their own
_SAID_ELSEWHERE = ({"learning_rate", "embedding_learning_rate", *SCHEDULE_KEYS}, ("learning_rate", "include"))
_NOT_SETTINGS = ("optimizer.", "concepts[]", "samples[]", "additional_embeddings[]", "secrets", "cloud")


def at(config: dict[str, Any], path: str) -> Any:
    """The value at a dotted path of a config's JSON; UNSET when it has none."""
    for key in path.split("."):
        if not isinstance(config, dict) or key not in config:
            return UNSET
        config = config[key]
    return config


def _said(path: str) -> bool:
    """Whether a change of `path` is said by this module."""
    top, _, leaf = path.rpartition(".")
    if path.startswith(_NOT_SETTINGS) or path in _SPEED_ONLY or path in _SAID_ELSEWHERE[0]:
        return False
    return not (top and leaf in (*_SPEED_ONLY_OF_A_PART, *_SAID_ELSEWHERE[1]))


_CHECKED = tuple(f for f in iter_fields(TrainConfig) if f.in_step and not f.backup_must_match and not f.compat and not f.group
                 and _said(f.path))
_SEED = next(f for f in iter_fields(TrainConfig) if f.path == "seed")


def _applies(field: Any, config: TrainConfig, now: dict[str, Any]) -> bool:
    """Whether the field means something for this run: a part's setting for a part of the model
    type (caption dropout on a text encoder), any other where its schema rule holds."""
    part, dot, leaf = field.path.partition(".")
    if dot and isinstance(getattr(config, part, None), ModelPartConfig):
        info = family_info(config.model_type)
        if info is not None and part not in (*info.parts, *info.extra_params):
            return False
        if field_meta(ModelPartConfig, leaf).get("text_encoder_only") and "text_encoder" not in part:
            return False
    return field.applies_when is None or bool(field.applies_when(now))


def _shown(config: dict[str, Any], field: Any) -> Any:
    found = at(config, field.path)
    return getattr(field.default, "value", field.default) if found is UNSET else found


def _value(config: dict[str, Any], field: Any) -> Any:
    return plain(_shown(config, field))


def changed_settings(old: dict[str, Any], config: TrainConfig, counters: Counters,
                     steps_in_epoch: Callable[[int], int] | None = None) -> list[str]:
    """The warnings for the settings this run changed since the backup (its config `old`), which
    continue from the backup's step `counters.global_step` with this run's values.
    `steps_in_epoch(epoch)`: the run's batches in an epoch; a backup written at an epoch's last
    batch (its epoch_step that many) finished the epoch, so a new seed draws nothing of it again."""
    now = config.model_dump(mode="json")
    finished = steps_in_epoch is not None and counters.epoch_step >= steps_in_epoch(counters.epoch)
    seed_mid_epoch = _value(old, _SEED) != _value(now, _SEED) and counters.epoch_step and not finished
    changes = [f"{field.label or field.path} ({field.path}) {_shown(old, field)!r} -> {_shown(now, field)!r}"
               for field in (*_CHECKED, *(() if seed_mid_epoch else (_SEED,)))
               if _value(old, field) != _value(now, field) and _applies(field, config, now)]
    said = ([f"{LEAD}changed since the backup, this run's values apply from step {counters.global_step} on: "
             + "; ".join(changes)] if changes else [])
    if seed_mid_epoch:
        before, after = _shown(old, _SEED), _shown(now, _SEED)
        said.append(
            f"{LEAD}seed {before!r} -> {after!r}: the backup stopped {counters.epoch_step} batch(es) into epoch "
            f"{counters.epoch + 1}, whose image order the seed draws; the rest of that epoch follows the new seed's order, so "
            f"some of its images may train twice and others not at all. Set Seed back to {before!r} to continue exactly")
    return said
