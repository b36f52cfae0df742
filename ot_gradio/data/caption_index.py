"""Captions kept in one file for a folder, as other tools keep them, read for the images that have
no caption file of their own (a `.txt` or `.caption` beside an image wins):

- diffusion-pipe's `captions.json`: `{"<file name>": ["a caption", "another", ...]}` for the images
  in its own folder (diffusion-pipe reads no subfolders); each string is a caption of its own;
- Hugging Face's image-folder `metadata.jsonl` / `metadata.csv` (the layout `datasets` loads and
  the hub's image datasets use), in the concept folder or any subfolder read: a row per caption,
  its `file_name` (a path from that metadata file's folder) and its `text`, `caption` or `prompt`;
  an image in several rows has each row's caption, as `datasets` keeps each row.

An image's captions from here are a list, as diffusion-pipe and `datasets` keep them: one drawn
each time the image is shown (FIRST of Caption file lines: the first only). An index file that
cannot be read stops the run with its name and why (its images would train uncaptioned).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DataError

INDEX_FILES = ("captions.json", "metadata.jsonl", "metadata.csv")
CAPTION_COLUMNS = ("text", "caption", "prompt")
MAX_INDEX_BYTES = 256 * 1024 * 1024  # a caption index far larger than any dataset's is not read


@dataclass
class CaptionIndex:
    """Captions by an image's path in the concept folder ('/'-separated)."""

    files: list[str] = field(default_factory=list)  # the index files read, relative to the folder
    by_path: dict[str, list[str]] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)  # the paths an image took its captions from

    def get(self, relpath: str) -> tuple[str, ...] | None:
        found = self.by_path.get(relpath)
        if found is None:
            return None
        self.used.add(relpath)
        return tuple(found)

    def unmatched(self) -> int:
        """Entries that named no image read."""
        return len(set(self.by_path) - self.used)


def _text(path: Path) -> str:
    data = path.read_bytes()
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):  # PowerShell's and Notepad's "Unicode"
        return data.decode("utf-16")
    return data.decode("utf-8-sig")


def _caption(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    return value.strip() if isinstance(value, str) else None


def _add(index: CaptionIndex, key: str, captions: list[str]) -> None:
    if captions:
        index.by_path.setdefault(key, []).extend(captions)


def _read_json(path: Path, text: str, prefix: str, index: CaptionIndex) -> None:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("it is not an object of file names and their captions")
    for name, value in data.items():
        values = value if isinstance(value, list) else [value]
        captions = [c for c in map(_caption, values) if c]
        if len(captions) < sum(v is not None for v in values):
            raise ValueError(f"the captions of '{name}' are not texts")
        _add(index, prefix + str(name).replace("\\", "/").rsplit("/", 1)[-1], captions)


def _read_rows(path: Path, text: str, prefix: str, index: CaptionIndex) -> None:
    if path.suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(text)))
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"line {number} is not JSON ({err.msg})") from None
                if isinstance(row, dict):
                    rows.append(row)
    column = next((c for c in CAPTION_COLUMNS if rows and c in rows[0]), None)
    if column is None or not all("file_name" in row for row in rows):
        raise ValueError("its rows need a file_name and a text, caption or prompt column")
    for row in rows:
        caption = _caption(row.get(column))
        name = posixpath.normpath(str(row["file_name"]).replace("\\", "/"))
        if caption and not name.startswith("../"):
            _add(index, prefix + name, [caption])


def read_caption_index(folder: Path, recursive: bool) -> CaptionIndex | None:
    """The caption index files of `folder` (and, with `recursive`, of its subfolders: a metadata
    file's paths are from its own folder), read; None when there is none. A DataError names one
    that cannot be read."""
    index = CaptionIndex()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if recursive else []
        relative = Path(root).relative_to(folder).as_posix()
        prefix = "" if relative == "." else relative + "/"
        for name in INDEX_FILES:
            if name not in files:
                continue
            path = Path(root) / name
            try:
                if path.stat().st_size > MAX_INDEX_BYTES:
                    raise ValueError(f"larger than {MAX_INDEX_BYTES // 2**20} MB")
                text = _text(path)
                (_read_json if name.endswith(".json") else _read_rows)(path, text, prefix, index)
            except (OSError, ValueError, UnicodeError, csv.Error) as err:  # (json.JSONDecodeError is a ValueError)
                raise DataError(f"{path} could not be read as captions ({err}); fix it, or move it out of the concept "
                                "folder to train without it") from None
            index.files.append(prefix + name)
    return index if index.files else None
