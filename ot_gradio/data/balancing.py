"""How many times each image of a concept appears in one epoch (OneTrainer's balancing).

As OneTrainer (MGDS's VariationSorting and DiskCache): an epoch of a concept of ``n`` images takes
``floor(n * b)`` samples with REPEATS ``b`` and ``int(b)`` with SAMPLES ``b``, computed with Python
floats as there (``floor(100 * 0.29)`` is 28, since ``100 * 0.29`` is 28.999999999999996). Every
image is shown ``k // n`` times per epoch; the ``r = k % n`` samples beyond those are the next ones
of an endless walk through the images in rounds, each round every image once, and each epoch's
``r`` continue where the previous epoch's stopped: epoch ``e`` takes walk positions
``e*r .. e*r+r-1``. So over the epochs every image is trained equally often (within one). The
plan of an epoch is computed from the epoch number alone, so a resumed run gets the same one.

OneTrainer walks the images in sorted file order, the same every round; planning.py gives each
round its own order, shuffled by the run and concept seed and the round. A fraction then does not
take the files of one name range first, and an image is not paired with the same others in every
round: with a fixed order, two images that always fall into the same epoch, one alone in its aspect
bucket and one alone in another, could be dropped with their unfilled buckets every time. A concept
whose count is 0 (1 image at REPEATS 0.5, SAMPLES below 1) is never trained, as in OneTrainer:
``zero_samples_warning`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ..config.balancing_count import epoch_count

__all__ = ["concept_balancing", "epoch_count", "epoch_indices", "epoch_showings", "max_repeats", "zero_samples_warning"]


def concept_balancing(concept: object) -> tuple[float, str]:
    """A concept config's (Balancing, Balancing strategy), with OneTrainer's defaults."""
    strategy = getattr(concept, "balancing_strategy", "REPEATS")
    return float(getattr(concept, "balancing", 1.0)), str(getattr(strategy, "value", strategy))


def epoch_indices(count: int, balancing: float, strategy: object, epoch: int,
                  order: Callable[[int], Sequence[int]] | None = None) -> list[int]:
    """Image indices (0..count-1) a concept contributes to epoch ``epoch``: the whole repeats in
    index order, then the rest sorted (for whole-number REPEATS, the list earlier versions gave, so
    their runs resume with the same plans).

    The samples beyond whole repeats are the next ones of a walk through rounds of the images,
    round ``r`` in the order ``order(r)`` (a permutation of the indices; default: index order every
    round, as OneTrainer), continuing where the previous epoch stopped: REPEATS 1.5 of 10 images
    shows every image once and 5 twice, the next 5 of the walk each epoch; SAMPLES 5 of 10 takes 5
    images and the other 5 of that round the next epoch.
    """
    return [index for index, _ in epoch_showings(count, balancing, strategy, epoch, order)]


def epoch_showings(count: int, balancing: float, strategy: object, epoch: int,
                   order: Callable[[int], Sequence[int]] | None = None) -> list[tuple[int, int]]:
    """``epoch_indices`` with, beside each index, how many times the run showed that image before
    this sample (epochs before this one first, then this epoch's earlier samples). MGDS's cache
    gives round ``r`` of its walk through a concept (each image once per round) cached variation
    ``r``, so an image's ``k``-th showing is its ``k``-th round: with REPEATS 2 an epoch shows each
    image in two variations, not the same one twice. For REPEATS 1 the number is the epoch."""
    wanted = epoch_count(count, balancing, strategy)
    if not wanted:
        return []
    whole, extra = divmod(wanted, count)
    rounds: dict[int, list[int]] = {}

    def round_order(round_: int) -> list[int]:
        if round_ not in rounds:
            rounds[round_] = list(range(count)) if order is None else list(order(round_))
            if sorted(rounds[round_]) != list(range(count)):
                raise ValueError(f"order({round_}) must be a permutation of 0..{count - 1}")
        return rounds[round_]

    # showings before this epoch: `whole` per epoch, plus one per round of the walk the earlier
    # epochs' extra samples went through (the last one partly, up to its place)
    start = epoch * extra
    done, place = divmod(start, count)
    shown = [epoch * whole + done] * count
    for index in round_order(done)[:place] if place else ():
        shown[index] += 1
    out = []
    for _ in range(whole):
        for index in range(count):
            out.append((index, shown[index]))
            shown[index] += 1
    picks = [round_order(round_)[at] for round_, at in (divmod(p, count) for p in range(start, start + extra))]
    for index in sorted(picks):
        out.append((index, shown[index]))
        shown[index] += 1
    return out


def max_repeats(count: int, balancing: float, strategy: object) -> int:
    """The most times one image can appear in one epoch under ``epoch_indices``."""
    return -(-epoch_count(count, balancing, strategy) // count) if count > 0 else 0


def zero_samples_warning(label: str, count: int, balancing: float, strategy: object, held_out: bool = False) -> str | None:
    """The warning for a concept with images that gives no sample in any epoch (None otherwise);
    `held_out`: a VALIDATION concept, never validated rather than never trained."""
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
    never = "validated (its loss is never computed)" if held_out else "trained"
    return (f"Concept '{label}': Balancing {balancing:g} with {how}, so this concept is never {never} (OneTrainer counts "
            f"the same way and uses none of it either); {fix}")
