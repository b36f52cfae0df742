"""Stable random streams: the same parts give the same stream in every process and run.

Python's ``hash()`` of a string changes per process, so streams are derived from a sha256 of
the parts instead. Each random decision (balancing, resolution, crop, flip, rotation and colour,
caption line, tag dropout, capitalisation, tag order) gets its own stream, so turning one option
on does not reshuffle the choices of the others.
"""

from __future__ import annotations

import hashlib
import random


def rng_for(*parts: object) -> random.Random:
    digest = hashlib.sha256(repr(parts).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class Streams:
    """Named streams sharing some parts (e.g. run seed, concept, epoch), made when first used."""

    def __init__(self, *parts: object):
        self.parts = parts
        self._streams: dict[str, random.Random] = {}

    def __getitem__(self, name: str) -> random.Random:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = rng_for(name, *self.parts)
        return stream
