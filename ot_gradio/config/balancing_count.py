"""How many samples a concept gives one epoch: OneTrainer's formulas for its Balancing option
(MGDS's VariationSorting / DiskCache), ``floor(n * b)`` for REPEATS and ``int(b)`` for SAMPLES,
computed with Python floats as there (``floor(100 * 0.29)`` is 28). A fact of the config option,
read by the trainer's data plan (data/balancing.py), the Training tab's step estimate and the
kohya import's steps-to-epochs conversion."""

from __future__ import annotations

import math


def epoch_count(count: int, balancing: float, strategy: object) -> int:
    """Samples a concept of ``count`` images gives each epoch: ``floor(count * balancing)`` for
    REPEATS, ``int(balancing)`` for SAMPLES (OneTrainer's formulas, float rounding included)."""
    if count <= 0 or balancing <= 0:
        return 0
    if str(getattr(strategy, "value", strategy)) == "SAMPLES":
        return int(balancing)
    return int(math.floor(count * balancing))
