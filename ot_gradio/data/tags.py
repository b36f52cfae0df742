"""Caption augmentation, per sample and epoch: tag dropout, capitalisation, tag shuffling.

The steps run in OneTrainer's order (dropout, then case, then order), so RANDOM WEIGHTED dropout
weighs a tag by where the caption's author wrote it, not where a shuffle moved it. Differences
from OneTrainer, on purpose:
- The first ``keep_tags_count`` tags (the trigger word) are never dropped, re-cased, lowercased
  or moved; OneTrainer changes their case too, and a trigger word in another case is another token.
- Tags are joined with the delimiter plus a space (", "), the way captions are written, for every
  step (OneTrainer joins shuffled tags with ", " and dropped ones with a bare delimiter).
- A missing special-tags file, an invalid regular expression or an unknown mode is a DataError
  before training instead of being silently ignored.
- kohya's `keep_tokens_separator` is read: in `ohwx woman ||| red hair, smiling` what comes before
  `|||` stays first and unchanged (and what follows a second `|||` stays last), only the part
  between is augmented, and the separator never reaches the text encoder (OneTrainer trains it
  as text).
"""

from __future__ import annotations

import csv
import io
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from .captions import beside_concept, read_text
from .errors import DataError
from .seeding import Streams

DROPOUT_MODES = ("FULL", "RANDOM", "RANDOM WEIGHTED")
KEEP_SEPARATOR = "|||"  # kohya's keep_tokens_separator
TRIGGER = "[trigger]"  # what ai-toolkit's captions say where the trigger word goes
SPECIAL_TAG_MODES = ("NONE", "BLACKLIST", "WHITELIST")
CAPS_MODES = ("capslock", "title", "first", "random")


@dataclass(frozen=True)
class SpecialTags:
    """The tags of the special tags mode: exact names, or regular expressions that must match a
    whole tag (also tried on the tag without surrounding parentheses, as OneTrainer does)."""

    names: frozenset[str] = frozenset()
    patterns: tuple[re.Pattern, ...] = ()

    def __contains__(self, tag: str) -> bool:
        if tag in self.names:
            return True
        bare = tag.strip("()")
        return any(p.fullmatch(tag) or p.fullmatch(bare) for p in self.patterns)


def special_tag_list(value: str, delimiter: str, folder: Path | None = None) -> list[str]:
    """The special tags setting as a list: a .txt file (one tag a line), a .csv file (first
    column), or the tags separated by the tag delimiter. A relative path is tried as given, then
    inside the concept folder."""
    value = value.strip()
    if value.lower().endswith((".txt", ".csv")):
        path = beside_concept(value, folder)
        if not path.is_file():
            raise DataError(f"special tags file '{value}' does not exist")
        text, _ = read_text(path)
        if path.suffix.lower() == ".csv":
            lines = [row[0] for row in csv.reader(io.StringIO(text)) if row]
        else:
            lines = text.splitlines()
        return [t.strip() for t in lines if t.strip()]
    parts = value.split(delimiter) if delimiter else [value]
    return [t.strip() for t in parts if t.strip()]


def _special_tags(values: list[str], regex: bool) -> SpecialTags:
    if not regex:
        return SpecialTags(names=frozenset(values))
    patterns = []
    for value in values:
        try:
            patterns.append(re.compile(value))
        except re.error as exc:
            raise DataError(f"special tag '{value}' is not a valid regular expression: {exc}") from None
    return SpecialTags(patterns=tuple(patterns))


def _join(tags: list[str], delimiter: str) -> str:
    return delimiter.join(tags) if delimiter.isspace() else (delimiter + " ").join(tags)


def randomize_case(tag: str, mode: str, rng) -> str:
    if mode == "capslock":
        return tag.upper()
    if mode == "title":
        return string.capwords(tag)
    if mode == "first":
        return tag.capitalize()
    return "".join(rng.choice((c.upper(), c.lower())) for c in tag)


@dataclass(frozen=True)
class TextAugment:
    """A concept's caption settings, checked once; ``apply`` runs them on one caption."""

    delimiter: str = ","
    keep: int = 1
    shuffle: bool = False
    dropout_mode: str | None = None  # None: tag dropout off
    dropout_probability: float = 0.0
    special_mode: str = "NONE"
    special: SpecialTags = field(default_factory=SpecialTags)
    caps_modes: tuple[str, ...] = ()  # empty: capitalisation randomisation off
    caps_probability: float = 0.0
    lowercase: bool = False
    trigger: str = ""  # replaces [trigger], else put before a caption without it (ai-toolkit's trigger_word)
    prefix: str = ""  # put before every caption with a space, before anything else (kohya's caption_prefix)
    suffix: str = ""  # put after every caption with a space (kohya's caption_suffix)

    @classmethod
    def from_config(cls, text: object | None, folder: Path | None = None) -> TextAugment:
        """Raises DataError for settings that cannot work (unknown mode, missing file, bad regex)."""
        if text is None:
            return cls()

        def get(name: str, default: object) -> object:
            return getattr(text, name, default)

        delimiter = str(get("tag_delimiter", ","))
        options: dict = {
            "delimiter": delimiter,
            "keep": max(0, int(get("keep_tags_count", 1))),
            "shuffle": bool(get("enable_tag_shuffling", False)),
            "lowercase": bool(get("caps_randomize_lowercase", False)),
            "trigger": str(get("trigger_word", "") or "").strip(),
            "prefix": str(get("caption_prefix", "") or "").strip(),
            "suffix": str(get("caption_suffix", "") or "").strip(),
        }
        probability = float(get("tag_dropout_probability", 0.0))
        if get("tag_dropout_enable", False) and probability > 0:
            mode = str(get("tag_dropout_mode", "FULL")).strip().upper()
            special_mode = str(get("tag_dropout_special_tags_mode", "NONE")).strip().upper()
            if mode not in DROPOUT_MODES:
                raise DataError(f"tag dropout mode '{mode}' is not one of {', '.join(DROPOUT_MODES)}")
            if special_mode not in SPECIAL_TAG_MODES:
                raise DataError(f"special tags mode '{special_mode}' is not one of {', '.join(SPECIAL_TAG_MODES)}")
            options.update(dropout_mode=mode, dropout_probability=probability, special_mode=special_mode)
            if special_mode != "NONE":
                values = special_tag_list(str(get("tag_dropout_special_tags", "")), delimiter, folder)
                options["special"] = _special_tags(values, bool(get("tag_dropout_special_tags_regex", False)))
        probability = float(get("caps_randomize_probability", 0.0))
        if get("caps_randomize_enable", False) and probability > 0:
            modes = tuple(m.strip().lower() for m in str(get("caps_randomize_mode", "")).split(",") if m.strip())
            unknown = [m for m in modes if m not in CAPS_MODES]
            if unknown or not modes:
                raise DataError(f"capitalisation modes '{', '.join(unknown)}' are not a subset of {', '.join(CAPS_MODES)}")
            options.update(caps_modes=modes, caps_probability=probability)
        augment = cls(**options)
        if not delimiter and (augment.shuffle or augment.dropout_mode or augment.caps_modes):
            raise DataError("the tag delimiter is empty: tag shuffling, dropout and capitalisation need one (usually ',')")
        return augment

    @property
    def random(self) -> bool:
        """The caption differs from draw to draw (shuffling, dropout or capitalisation at random)."""
        return bool(self.shuffle or (self.dropout_mode and self.dropout_probability > 0)
                    or (self.caps_modes and self.caps_probability > 0))

    @property
    def active(self) -> bool:
        return bool(self.shuffle or self.dropout_mode or self.caps_modes or self.lowercase)

    def frame(self, caption: str) -> str:
        """The caption with its trigger word (ai-toolkit's: in place of `[trigger]`, else before
        it), then the prefix and suffix, joined with a space as sd-scripts joins them."""
        if self.trigger:
            caption = caption.replace(TRIGGER, self.trigger)
            if self.trigger not in caption:
                caption = f"{self.trigger} {caption.strip()}".strip()
        if not (self.prefix or self.suffix):
            return caption
        return " ".join(part for part in (self.prefix, caption.strip(), self.suffix) if part)

    def apply(self, caption: str, rngs: Streams) -> str:
        caption = self.frame(caption)  # before any augmentation, as sd-scripts
        if KEEP_SEPARATOR in caption:  # kohya's: fixed ||| augmented [||| fixed]; keep_tags_count gives way to it
            head, _, rest = caption.partition(KEEP_SEPARATOR)
            middle, _, tail = rest.partition(KEEP_SEPARATOR)
            middle = self._augment(middle.strip(), rngs, keep=0)
            parts = [p.strip() for p in (head, middle, tail.replace(KEEP_SEPARATOR, " ")) if p.strip()]
            return _join(parts, self.delimiter if self.delimiter.strip() else ",")
        return self._augment(caption, rngs, self.keep)

    def _augment(self, caption: str, rngs: Streams, keep: int) -> str:
        if not self.active or not caption:
            return caption
        if self.shuffle and not (self.dropout_mode or self.caps_modes or self.lowercase) and self.delimiter not in caption:
            return caption
        parts = caption.split(self.delimiter) if self.delimiter else [caption]
        tags = [t.strip() for t in parts if t.strip()]
        head, tail = tags[:keep], tags[keep:]
        if self.dropout_mode:
            tail = self._drop(tail, rngs["tag_dropout"])
        if self.lowercase:
            tail = [t.lower() for t in tail]
        if self.caps_modes:
            rng = rngs["caps"]
            tail = [randomize_case(t, rng.choice(self.caps_modes), rng) if rng.random() < self.caps_probability else t for t in tail]
        if self.shuffle:
            rngs["shuffle"].shuffle(tail)
        return _join(head + tail, self.delimiter)

    def _drop(self, tags: list[str], rng) -> list[str]:
        """OneTrainer's modes. FULL: with the probability, drop every droppable tag at once.
        RANDOM: drop each tag with the probability. RANDOM WEIGHTED: the i-th of n tags with
        probability * (i + 1) / n, so late tags go more often. WHITELIST tags are never dropped;
        with BLACKLIST only the listed tags can be."""
        mode, special = self.special_mode, self.special

        def droppable(tag: str) -> bool:
            if mode == "WHITELIST":
                return tag not in special
            if mode == "BLACKLIST":
                return tag in special
            return True

        if self.dropout_mode == "FULL":
            if rng.random() >= self.dropout_probability:
                return tags
            return [t for t in tags if not droppable(t)]
        out = []
        for i, tag in enumerate(tags):
            p = self.dropout_probability
            if self.dropout_mode == "RANDOM WEIGHTED":
                p *= (i + 1) / len(tags)
            if rng.random() >= p or not droppable(tag):
                out.append(tag)
        return out
