"""Captions kept in one file for a whole concept folder, as other tools keep them, read for the
images that have no caption file of their own (a `.txt` or `.caption` beside an image wins):

- diffusion-pipe's `captions.json`: `{"<file name>": ["a caption", "another", ...]}`, each string a
  caption of the image (a plain string is one caption);
- Hugging Face's image-folder `metadata.jsonl` / `metadata.csv` (the layout `datasets` loads and
  the hub's image datasets use): a row per image, its `file_name` (a path inside the folder) and its
  caption in a `text`, `caption` or `prompt` column.

An image's captions from here are its caption lines: the concept's Caption file lines applies to
them as to a file's lines. A file that cannot be read is named in a warning and left out.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INDEX_FILES = ("captions.json", "metadata.jsonl", "metadata.csv")
CAPTION_COLUMNS = ("text", "caption", "prompt")
MAX_INDEX_BYTES = 64 * 1024 * 1024  # a caption index far larger than any dataset's is not read


@dataclass
class CaptionIndex:
    """Captions by an image's path inside the folder ('/'-separated), and by its file name alone
    (diffusion-pipe keys images by name)."""

    files: list[str] = field(default_factory=list)  # the index files read
    by_path: dict[str, tuple[str, ...]] = field(default_factory=dict)
    by_name: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def get(self, relpath: str) -> tuple[str, ...] | None:
        found = self.by_path.get(relpath)
        return found if found is not None else self.by_name.get(relpath.rsplit("/", 1)[-1])


def _captions(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(v.strip() for v in value if v.strip())


def _rows(path: Path, text: str) -> list[dict[str, Any]]:
    if path.suffix == ".csv":
        return list(csv.DictReader(io.StringIO(text)))
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"line {number} is not JSON ({err.msg})") from None
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _read(path: Path, index: CaptionIndex) -> None:
    if path.stat().st_size > MAX_INDEX_BYTES:
        raise ValueError(f"larger than {MAX_INDEX_BYTES // 2**20} MB")
    text = path.read_text(encoding="utf-8-sig")
    if path.name == "captions.json":
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("it is not an object of file names and their captions")
        for name, value in data.items():
            captions = _captions(value)
            if captions is None:
                raise ValueError(f"the captions of '{name}' are not a list of texts")
            index.by_name[str(name).replace("\\", "/").rsplit("/", 1)[-1]] = captions
        return
    rows = _rows(path, text)
    column = next((c for c in CAPTION_COLUMNS if rows and c in rows[0]), None)
    if column is None or not all("file_name" in row for row in rows):
        raise ValueError("its rows need a file_name and a text, caption or prompt column")
    for row in rows:
        captions = _captions(row.get(column) or "")
        if captions is not None:
            index.by_path[str(row["file_name"]).replace("\\", "/").removeprefix("./")] = captions


def read_caption_index(folder: Path, warn) -> CaptionIndex | None:
    """The folder's caption index files, read; None when it has none. `warn(text)` names a file
    that could not be read (it is left out)."""
    index = CaptionIndex()
    for name in INDEX_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            _read(path, index)
            index.files.append(name)
        except (OSError, ValueError, UnicodeError) as err:  # (json.JSONDecodeError is a ValueError)
            warn(f"{path}: not read as captions ({err}); its images train without them")
    return index if index.files else None
