"""Caption files and the per-epoch caption choice.

A caption file holds one caption per non-empty line; each epoch one line is picked at random, so
several phrasings of the same image teach the concept without memorising one sentence.
"""

from __future__ import annotations

import random
from pathlib import Path


def read_text(path: Path) -> tuple[str, str | None]:
    """Return (text, warning). UTF-8 (with or without BOM) first; files saved by old Windows
    editors are often latin-1, which always decodes, so it is the fallback and earns a warning."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        return data.decode("latin-1"), f"{path}: not valid UTF-8, read as latin-1; check accented characters"


def caption_lines(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def read_captions(path: Path) -> tuple[tuple[str, ...], str | None]:
    """Captions of one file as (lines, warning); an empty file gives no lines."""
    text, warning = read_text(path)
    return caption_lines(text), warning


def shuffle_tags(caption: str, rng: random.Random, delimiter: str = ",", keep: int = 1) -> str:
    """Shuffle the tags after the first ``keep`` (the trigger word usually stays first)."""
    if not delimiter or delimiter not in caption:
        return caption
    tags = [t.strip() for t in caption.split(delimiter)]
    tags = [t for t in tags if t]
    head, tail = tags[:keep], tags[keep:]
    rng.shuffle(tail)
    joiner = delimiter + " " if not delimiter.isspace() else delimiter
    return joiner.join(head + tail)


def pick_caption(captions: tuple[str, ...], rng: random.Random, text_config: object | None = None) -> str:
    """One caption for one sample of one epoch, with tag shuffling when the concept enables it."""
    if not captions:
        return ""
    caption = captions[rng.randrange(len(captions))] if len(captions) > 1 else captions[0]
    if text_config is not None and getattr(text_config, "enable_tag_shuffling", False):
        caption = shuffle_tags(
            caption,
            rng,
            delimiter=getattr(text_config, "tag_delimiter", ","),
            keep=int(getattr(text_config, "keep_tags_count", 1)),
        )
    return caption
