"""How many times each image of a concept appears in one epoch (OneTrainer's balancing).

As OneTrainer (MGDS's VariationSorting and DiskCache): an epoch of a concept of ``n`` images takes
``floor(n * b)`` samples with REPEATS ``b`` and ``int(b)`` with SAMPLES ``b``, computed with Python
floats as there (``floor(100 * 0.29)`` is 28, since ``100 * 0.29`` is 28.999999999999996). The
samples are a window of that length on an endless cycle through the concept's images, and each
epoch's window starts where the previous one ended: epoch ``e`` takes positions ``e*k .. e*k+k-1``
of the cycle. So every image is shown ``k // n`` times per epoch, the ``k % n`` images after that
are the next ones in the cycle, and over the epochs every image is trained equally often (within
one). The plan of an epoch is computed from the epoch number alone, so a resumed run gets the
same one.

OneTrainer cycles through the images in sorted file order; planning.py passes a per-concept order
shuffled once by the run and concept seed (the same every epoch), so a fraction does not take the
files of one name range first. A concept whose count is 0 (1 image at REPEATS 0.5, SAMPLES below
1) is never trained, as in OneTrainer: ``zero_samples_warning`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def epoch_count(count: int, balancing: float, strategy: object) -> int:
    """Samples a concept of ``count`` images gives each epoch: ``floor(count * balancing)`` for
    REPEATS, ``int(balancing)`` for SAMPLES (OneTrainer's formulas, float rounding included)."""
    if count <= 0 or balancing <= 0:
        return 0
    if str(strategy) == "SAMPLES":
        return int(balancing)
    return int(math.floor(count * balancing))


def epoch_indices(count: int, balancing: float, strategy: object, epoch: int, order: Sequence[int] | None = None) -> list[int]:
    """Image indices (0..count-1) a concept contributes to epoch ``epoch``: the whole repeats in
    index order, then the rest sorted (for whole-number REPEATS, the list earlier versions gave, so
    their runs resume with the same plans).

    The ``epoch_count`` samples of the epoch are the next ones of a cycle through ``order`` (a
    permutation of the indices; default: index order, as OneTrainer), continuing where the previous
    epoch stopped: REPEATS 1.5 of 10 images shows every image once and 5 twice, the next 5 in the
    order each epoch; SAMPLES 5 of 10 takes 5 images and the other 5 the next epoch.
    """
    wanted = epoch_count(count, balancing, strategy)
    if not wanted:
        return []
    cycle = list(range(count)) if order is None else list(order)
    if sorted(cycle) != list(range(count)):
        raise ValueError(f"order must be a permutation of 0..{count - 1}")
    whole, extra = divmod(wanted, count)
    start = (epoch % count) * extra % count  # == (epoch * wanted) % count: where this epoch's window begins
    out = [i for _ in range(whole) for i in range(count)]
    out.extend(sorted(cycle[(start + j) % count] for j in range(extra)))
    return out


def max_repeats(count: int, balancing: float, strategy: object) -> int:
    """The most times one image can appear in one epoch under ``epoch_indices``."""
    return -(-epoch_count(count, balancing, strategy) // count) if count > 0 else 0


def zero_samples_warning(label: str, count: int, balancing: float, strategy: object) -> str | None:
    """The warning for a concept with images that gives no sample in any epoch (None otherwise)."""
    if count <= 0 or epoch_count(count, balancing, strategy) > 0:
        return None
    if str(strategy) == "SAMPLES":
        how, fix = f"SAMPLES takes int({balancing:g}) = 0 images per epoch", "set Balancing to at least 1"
    else:
        least = math.ceil(1000 / count) / 1000
        while math.floor(count * least) < 1:
            least += 0.001
        how = f"REPEATS takes floor({count} image(s) × {balancing:g}) = 0 samples per epoch"
        fix = f"set Balancing to at least {least:g}, or use Balancing strategy SAMPLES with Balancing 1 or more"
    return (f"Concept '{label}': Balancing {balancing:g} with {how}, so this concept is never trained (OneTrainer counts "
            f"the same way and trains none of it either); {fix}")
