"""Stable random streams: the same parts give the same stream in every process and run.

Python's ``hash()`` of a string changes per process, so streams are derived from a sha256 of
the parts instead. Each random decision (balancing, resolution, crop, flip, caption) gets its own
stream, so changing one setting does not reshuffle unrelated choices.
"""

from __future__ import annotations

import hashlib
import random


def rng_for(*parts: object) -> random.Random:
    digest = hashlib.sha256(repr(parts).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))
