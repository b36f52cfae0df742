"""Caption files and the per-epoch caption choice.

A caption file holds one caption per non-empty line; each epoch one line is picked at random, so
several phrasings of the same image teach the concept without memorising one sentence. Tag
dropout, capitalisation and shuffling of the chosen line are in ``tags``.
"""

from __future__ import annotations

import codecs
import random
from pathlib import Path

from ..config.media_files import CAPTION_EXTENSIONS

MAX_CAPTION_BYTES = 1024 * 1024  # a caption file far larger than any caption is not read whole


def caption_path(image: Path) -> Path:
    """The caption file training reads for `image`: `<stem>.txt`, else kohya's `<stem>.caption`
    where only that one exists; `<stem>.txt` (where a caption is written) when neither does."""
    txt = Path(image).with_suffix(CAPTION_EXTENSIONS[0])
    if not txt.is_file():
        for ext in CAPTION_EXTENSIONS[1:]:
            if (other := txt.with_suffix(ext)).is_file():
                return other
    return txt


def read_text(path: Path) -> tuple[str, str | None]:
    """Return (text, warning). UTF-8 (with or without BOM) first; UTF-16 with its BOM (Notepad's
    "Unicode"); files saved by old Windows editors are often latin-1, which always decodes, so it
    is the fallback and earns a warning."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_CAPTION_BYTES + 1)
    cut = None
    if len(data) > MAX_CAPTION_BYTES:
        data = data[:MAX_CAPTION_BYTES]
        cut = f"{path}: larger than {MAX_CAPTION_BYTES // 1024} KB; only its beginning is read"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace"), cut
    try:
        return data.decode("utf-8-sig"), cut
    except UnicodeDecodeError as err:
        if cut and err.start >= len(data) - 3:  # a character cut in two at the end
            return data[:err.start].decode("utf-8-sig", errors="replace"), cut
        return data.decode("latin-1"), cut or f"{path}: not valid UTF-8, read as latin-1; check accented characters"


def caption_lines(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def read_captions(path: Path) -> tuple[tuple[str, ...], str | None]:
    """Captions of one file as (lines, warning); an empty file gives no lines."""
    text, warning = read_text(path)
    return caption_lines(text), warning


def pick_line(captions: tuple[str, ...], rng: random.Random) -> str:
    """One caption line for one sample of one epoch (augmentation: ``tags.TextAugment``)."""
    if not captions:
        return ""
    return captions[rng.randrange(len(captions))] if len(captions) > 1 else captions[0]


def beside_concept(value: str, folder: Path | None) -> Path:
    """A file a concept names (its prompt file, its special tags file) as a run reads it: as
    given, else, for a relative name that is not there, inside the concept folder."""
    path = Path(str(value).strip()).expanduser()
    if folder is not None and not path.is_absolute() and not path.exists() and (folder / path).exists():
        return folder / path
    return path
