"""Captions kept in one file for a folder, as other tools keep them, read for the images that have
no caption file of their own (a `.txt` or `.caption` beside an image wins):

- diffusion-pipe's `captions.json`: `{"<file name>": ["a caption", "another", ...]}` for the images
  in its own folder (diffusion-pipe reads no subfolders); each string is a caption of its own;
- Hugging Face's image-folder `metadata.jsonl` / `metadata.csv` (the layout `datasets` loads and
  the hub's image datasets use), in the concept folder or any subfolder read: a row per caption,
  its `file_name` (a path from that metadata file's folder) and its `text`, `caption` or `prompt`;
  an image in several rows has each row's caption, as `datasets` keeps each row.

A concept's *Captions file* names one such file anywhere instead (the folder's own are then not
looked for); it may also be kohya's fine-tuning metadata (`meta_cap.json` / `meta_lat.json`:
`{"<image>": {"caption": ..., "tags": ...}}`, or `.jsonl` rows of `image_path`, `caption`, `tags`;
musubi-tuner's image_jsonl_file / video_jsonl_file rows, `image_path` or `video_path` and `caption`),
whose names are from the concept folder (sd-scripts' image_dir) or absolute, and without their
extension match an image of any (as `merge_captions_to_metadata.py` writes them); its caption is
`caption,tags`, as sd-scripts joins them. As in sd-scripts' fine-tuning, such a file names the
images that train (the others are left out, counted) and its captions win over caption files.

An image's captions from here are a list, as diffusion-pipe and `datasets` keep them: one drawn
each time the image is shown (FIRST of Caption file lines: the first only). An index file that
cannot be read stops the run with its name and why (its images would train uncaptioned).
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import jsontext
from .errors import DataError

INDEX_FILES = ("captions.json", "metadata.jsonl", "metadata.csv")
CAPTION_COLUMNS = ("text", "caption", "prompt")
MAX_INDEX_BYTES = 256 * 1024 * 1024  # a caption index far larger than any dataset's is not read
WHOLE_PATH = re.compile(r"^(/|[A-Za-z]:/|//)")  # a whole path, of this machine or a Windows one ('/'-separated)


@dataclass
class CaptionIndex:
    """Captions by an image's path in the concept folder ('/'-separated)."""

    files: list[str] = field(default_factory=list)  # the index files read, relative to the folder
    by_path: dict[str, list[str]] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)  # the paths an image took its captions from
    # a concept's Captions file: it names the images that train (a name without its extension too, as
    # kohya's metadata names them), and its captions win over caption files
    named: bool = False
    _elsewhere: dict[str, str] | None = None  # whole paths outside the folder by their file names (a name in one only)
    shared: int = 0  # files left out because the entry naming them (without its extension) took another file

    def key(self, relpath: str) -> str | None:
        """The entry naming the image, if any; in a Captions file, a whole path of another folder or
        machine (metadata made on the desktop, a dataset moved since) names it by its file name
        where no other entry has that name."""
        for key in (relpath, posixpath.splitext(relpath)[0]) if self.named else (relpath,):
            if key in self.by_path:
                return key
        if not self.named:
            return None
        if self._elsewhere is None:
            names: dict[str, list[str]] = {}
            for key in self.by_path:
                if WHOLE_PATH.match(key):
                    names.setdefault(posixpath.basename(key), []).append(key)
            self._elsewhere = {name: keys[0] for name, keys in names.items() if len(keys) == 1}
        name = posixpath.basename(relpath)
        return self._elsewhere.get(name) or self._elsewhere.get(posixpath.splitext(name)[0])

    def get(self, relpath: str) -> tuple[str, ...] | None:
        if (key := self.key(relpath)) is None:
            return None
        self.used.add(key)
        return tuple(self.by_path[key])

    def unmatched(self) -> int:
        """Entries that named no image read."""
        return len(set(self.by_path) - self.used)


def _text(path: Path) -> str:
    """An index file's text (at most MAX_INDEX_BYTES), UTF-8 or UTF-16 with its BOM."""
    if path.stat().st_size > MAX_INDEX_BYTES:
        raise ValueError(f"larger than {MAX_INDEX_BYTES // 2**20} MB")
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
    data = jsontext.loads(text)
    if not isinstance(data, dict):
        raise ValueError("it is not an object of file names and their captions")
    for name, value in data.items():
        _add(index, prefix + str(name).replace("\\", "/").rsplit("/", 1)[-1], _listed(name, value))


def _listed(name: Any, value: Any) -> list[str]:
    """diffusion-pipe's captions of one image: a text, or a list of them (empty ones dropped)."""
    values = value if isinstance(value, list) else [value]
    captions = [c for c in map(_caption, values) if c]
    if len(captions) < sum(v is not None for v in values):
        raise ValueError(f"the captions of '{name}' are not texts")
    return captions


def _kohya_captions(entry: dict[str, Any], name: str, separator: str, each_line: bool) -> list[str]:
    """sd-scripts' caption of a metadata entry (FineTuningDataset): its caption, then its tags after
    the caption separator; with enable_wildcard (`each_line`) each non-empty line of the caption,
    the tags after each, a caption of its own (one line is drawn each time there)."""
    caption, tags = _caption(entry.get("caption")), _caption(entry.get("tags"))
    if (entry.get("caption") is not None and caption is None) or (entry.get("tags") is not None and tags is None):
        raise ValueError(f"the caption or tags of '{name}' are not texts")
    if caption is None:  # a tags-only entry (a tagger's metadata): its tags are its caption, as sd-scripts reads it
        caption, tags = tags or "", None
    if each_line:
        lines = [line for line in caption.split("\n") if line.strip()]
        return [f"{line}{separator}{tags.replace(chr(10), separator)}" if tags is not None else line for line in lines]
    return [c] if (c := separator.join(part for part in (caption, tags) if part)) else []


def _named_key(name: str, folder: Path) -> str:
    """A named captions file's image name as a path in the concept folder: relative ones as they
    are, absolute ones inside the folder made relative (others stay, naming no image)."""
    name = str(name).replace("\\", "/")
    if os.path.isabs(name):
        root = os.path.abspath(folder)
        if os.path.commonpath([root, os.path.abspath(name)]) == root:
            return Path(os.path.relpath(os.path.abspath(name), root)).as_posix()
        return name
    return posixpath.normpath(name)


def _read_named_json(text: str, folder: Path, prefix: str, index: CaptionIndex, separator: str, each_line: bool) -> None:
    data = jsontext.loads(text)
    if not isinstance(data, dict):
        raise ValueError("it is not an object of image names and their captions")
    for name, value in data.items():
        if isinstance(value, dict):  # kohya's metadata
            index.by_path.setdefault(_named_key(name, folder), []).extend(_kohya_captions(value, name, separator, each_line))
            continue
        # diffusion-pipe's: a file name in the file's own folder (an empty caption names its image too)
        index.by_path.setdefault(posixpath.normpath(prefix + str(name).replace("\\", "/")), []).extend(_listed(name, value))


def _read_rows(path: Path, text: str, prefix: str, index: CaptionIndex, folder: Path | None = None, separator: str = ",",
               each_line: bool = False) -> None:
    if path.suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(text)))
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    row = jsontext.loads(line)
                except ValueError as err:
                    raise ValueError(f"line {number} is not JSON ({getattr(err, 'msg', err)})") from None
                if isinstance(row, dict):
                    rows.append(row)
    path_key = next((key for key in ("image_path", "video_path") if rows and key in rows[0]), None)
    if folder is not None and path_key:  # kohya's metadata rows, musubi-tuner's image_jsonl_file / video_jsonl_file
        for number, row in enumerate(rows, 1):
            if path_key not in row:
                raise ValueError(f"row {number} has no {path_key}")
            index.by_path.setdefault(_named_key(row[path_key], folder), []).extend(
                _kohya_captions(row, row[path_key], separator, each_line))
        return
    column = next((c for c in CAPTION_COLUMNS if rows and c in rows[0]), None)
    if column is None or not all("file_name" in row for row in rows):
        raise ValueError("its rows need a file_name and a text, caption or prompt column")
    for row in rows:
        caption = _caption(row.get(column))
        name = posixpath.normpath(str(row["file_name"]).replace("\\", "/"))
        if (caption or index.named) and not name.startswith("../"):  # (a named file's empty caption names its image too)
            index.by_path.setdefault(prefix + name, []).extend([caption] if caption else [])


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
                text = _text(path)
                (_read_json if name.endswith(".json") else _read_rows)(path, text, prefix, index)
            except (OSError, ValueError, UnicodeError, csv.Error) as err:  # (json.JSONDecodeError is a ValueError)
                raise DataError(f"{path} could not be read as captions ({err}); fix it, or move it out of the concept "
                                "folder to train without it") from None
            index.files.append(prefix + name)
    return index if index.files else None


def read_captions_file(path: Path, folder: Path, separator: str = ",", each_line: bool = False) -> CaptionIndex:
    """A concept's named captions file (its *Captions file*) for the images of `folder`; kohya's
    entries joined by `separator` (its caption_separator, the concept's tag delimiter), with
    `each_line` as enable_wildcard joins them. A DataError names one that cannot be read."""
    index = CaptionIndex(files=[str(path)], named=True)
    try:
        text = _text(path)
        # diffusion-pipe's and Hugging Face's names are from the file's own folder where it is in the concept folder;
        # kohya's and musubi-tuner's from the concept folder (sd-scripts' image_dir), or whole paths
        relative = _named_key(os.path.abspath(path.parent), folder)
        prefix = "" if os.path.isabs(relative) or relative == "." else relative + "/"
        if path.suffix.lower() == ".json":
            _read_named_json(text, folder, prefix, index, separator, each_line)
        elif path.suffix.lower() in (".jsonl", ".csv"):
            _read_rows(path.with_suffix(path.suffix.lower()), text, prefix, index, folder, separator, each_line)
        else:
            raise ValueError("it is not a .json, .jsonl or .csv file")
    except (OSError, ValueError, UnicodeError, csv.Error) as err:
        raise DataError(f"Captions file {path} could not be read ({err}); fix it, or clear the concept's Captions file") from None
    return index
