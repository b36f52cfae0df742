"""How many times each image of a concept appears in one epoch (OneTrainer's balancing)."""

from __future__ import annotations

import random


def epoch_indices(count: int, balancing: float, strategy: object, rng: random.Random) -> list[int]:
    """Image indices (0..count-1) a concept contributes to one epoch, in concept order.

    REPEATS b: every image ``int(b)`` times, plus a random subset of ``round(frac(b) * count)``
    images, so 1.5 shows every image once and half of them twice (a different half each epoch).
    SAMPLES b: exactly ``int(b)`` samples, drawn as consecutive random permutations of the images,
    so each image appears as evenly as possible.
    """
    if count <= 0 or balancing <= 0:
        return []
    if str(strategy) == "SAMPLES":
        wanted = int(balancing)
        out: list[int] = []
        while len(out) < wanted:
            order = list(range(count))
            rng.shuffle(order)
            out.extend(order[: wanted - len(out)])
        return out
    whole = int(balancing)
    extra = int((balancing - whole) * count + 0.5)
    out = [i for _ in range(whole) for i in range(count)]
    if extra:
        out.extend(sorted(rng.sample(range(count), min(extra, count))))
    return out


def max_repeats(count: int, balancing: float, strategy: object) -> int:
    """The most times one image can appear in one epoch under ``epoch_indices``."""
    if count <= 0 or balancing <= 0:
        return 0
    if str(strategy) == "SAMPLES":
        return -(-int(balancing) // count)
    whole = int(balancing)
    return whole + (1 if int((balancing - whole) * count + 0.5) else 0)
