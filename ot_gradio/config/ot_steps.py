"""A OneTrainer config's step counts as optimizer steps.

With gradient accumulation N above 1, OneTrainer counts a step per batch: its warmup (a whole
number of steps) is divided by N for the scheduler, and every STEP interval (sample, save, backup,
validate, skip first) and a step-counted stop of a part or an embedding count batches. Here a step
is an optimizer step, so an imported config's counts are divided by N, and it trains as it did
there. Fractions of the run (a warmup up to 1) and every other unit are the same in both.
"""

from __future__ import annotations

from typing import Any

from .lr_schedules import warmup_option

# (interval, its unit) pairs at the top of the config
_INTERVALS = (("sample_after", "sample_after_unit"), ("save_every", "save_every_unit"),
              ("backup_after", "backup_after_unit"), ("validate_after", "validate_after_unit"),
              ("sample_skip_first", "sample_after_unit"), ("save_skip_first", "save_every_unit"))


def _count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _per_window(batches: float, n: int, *, at_least_one: bool) -> int:
    steps = int(batches / n + 0.5)  # the optimizer step nearest to OneTrainer's batch
    return max(steps, 1) if at_least_one else steps


def batch_counted_steps(data: dict[str, Any]) -> str | None:
    """Divide the step counts of a OneTrainer config (our key layout, not validated) by its
    accumulation steps; returns the note naming each change, None when nothing changed. Values of
    another type are left for validation to report."""
    n = data.get("gradient_accumulation_steps")
    try:  # 4.0 or "4", as validation reads them
        n = int(float(n)) if not isinstance(n, bool) and float(n) == int(float(n)) else None
    except (TypeError, ValueError):
        return None
    if n is None or n <= 1:
        return None
    changed: list[str] = []

    def convert(holder: dict[str, Any], key: str, label: str, *, at_least_one: bool = True) -> None:
        old = holder[key]
        new = _per_window(old, n, at_least_one=at_least_one)
        holder[key] = new
        if new != old:
            changed.append(f"{label} {old:g} -> {new}")

    warmup = data.get("learning_rate_warmup_steps")
    if _count(warmup) and warmup > 1:  # OneTrainer: int(warmup / N) optimizer steps; up to 1 is a fraction
        steps = int(warmup / n)
        data["learning_rate_warmup_steps"] = warmup_option(steps)  # one step: 0 (1 reads as the whole run)
        changed.append(f"learning_rate_warmup_steps {warmup:g} -> {data['learning_rate_warmup_steps']:g}")
    for key, unit in _INTERVALS:
        if data.get(unit) == "STEP" and _count(data.get(key)):
            convert(data, key, key, at_least_one=not key.endswith("skip_first"))
    sections = list(data.items())  # the model parts and the embedding
    embeddings = data.get("additional_embeddings")
    if isinstance(embeddings, list):
        sections += [(f"additional_embeddings.{i}", item) for i, item in enumerate(embeddings)]
    for name, section in sections:
        if isinstance(section, dict) and section.get("stop_training_after_unit") == "STEP" and _count(section.get("stop_training_after")):
            convert(section, "stop_training_after", f"{name}.stop_training_after")
    if not changed:
        return None
    return (f"gradient_accumulation_steps {n}: OneTrainer counts a step per batch, this trainer per optimizer step "
            f"(every {n} batches), so the config's step counts are divided by {n}, to train as there: "
            + ", ".join(changed) + ".")
