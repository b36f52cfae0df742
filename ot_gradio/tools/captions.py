"""The caption editor's core: list a dataset's images and clips with their captions a page at a time, edit
one caption, and run bulk operations (find/replace, prefix, suffix, add/remove tags) with a
preview and a one-step undo. Torch-free: the page and the command line import it.

On disk (decisions the page and the command line share):
- A caption is ``<stem>.txt`` next to its image or clip; each non-empty line is one caption. A
  clip's thumbnail is its first frame.
- Every write is atomic (`fsutil`) and first copies the previous caption to
  ``<image folder>/.ot_captions/backup/<stem>.txt`` (the latest previous version). The folder is
  hidden, so a dataset scan (which skips hidden folders and only pairs ``<stem>.txt`` with its
  image) never takes a backup for a caption.
- A bulk operation writes its undo journal ``<folder>/.ot_captions/undo.json`` *before* touching
  any caption: the exact previous bytes of every file it changes (or "absent" for a caption it
  creates). `undo_last` puts those bytes back and deletes created files, so even an operation
  interrupted half way can be undone. Only the last bulk operation is kept.
- Listing never opens an image: a page of thousands of files costs one directory walk plus the
  shown page's caption reads. Thumbnails are made lazily, only for the shown page, into a cache
  folder the caller gives (the page uses its workspace, never the dataset).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..data.captions import caption_path, read_text
from ..data.images import is_image_name
from ..data.scan import list_image_files
from ..data.video import is_video_name
from ..fsutil import atomic_write, atomic_write_bytes, atomic_write_json

HIDDEN_DIR = ".ot_captions"
JOURNAL = "undo.json"
OPERATIONS = ("replace", "prefix", "suffix", "add_tags", "remove_tags")
THUMB_SIZE = 256


class CaptionError(ValueError):
    """Something the user can fix: a missing folder, a bad regex, nothing to undo."""


def caption_file(image: Path) -> Path:
    """The caption file training reads (`.txt`, or kohya's `.caption` where only that exists)."""
    return caption_path(Path(image))


def backup_file(caption: Path) -> Path:
    caption = Path(caption)
    return caption.parent / HIDDEN_DIR / "backup" / caption.name


def journal_file(folder: Path) -> Path:
    return Path(folder) / HIDDEN_DIR / JOURNAL


def read_caption(image: Path) -> str:
    """The caption text of an image ("" when it has no caption file)."""
    path = caption_file(image)
    return read_text(path)[0] if path.is_file() else ""


def normalize(text: str) -> str:
    """One caption per line: lines stripped, empty ones dropped (what training reads anyway)."""
    return "\n".join(line.strip() for line in str(text or "").splitlines() if line.strip())


# --- writing ----------------------------------------------------------------------------------------
def _replace_bytes(path: Path, data: bytes | None) -> bool:
    """Set a caption file to `data` (None deletes it), backing up what was there. False if unchanged."""
    old = path.read_bytes() if path.is_file() else None
    if old == data:
        return False
    if old is not None:
        atomic_write_bytes(backup_file(path), old)
    if data is None:
        path.unlink()
    else:
        atomic_write_bytes(path, data)
    return True


def write_caption(image: Path, text: str) -> bool:
    """Save one image's caption (normalised); returns False when the file already held it."""
    image = Path(image)
    if not (is_image_name(image.name) or is_video_name(image.name)):
        raise CaptionError(f"{image.name} is not an image or clip file")
    if not image.is_file():
        raise CaptionError(f"image '{image}' does not exist")
    return _replace_bytes(caption_file(image), normalize(text).encode("utf-8"))


# --- listing and paging --------------------------------------------------------------------------
@dataclass(frozen=True)
class CaptionItem:
    image: Path
    name: str  # relative to the opened folder, '/'-separated
    caption: str
    has_caption: bool


@dataclass
class CaptionPage:
    folder: Path
    items: list[CaptionItem]
    page: int  # 1-based, clamped to 1..pages
    pages: int
    total: int
    page_size: int


def _folder(folder: str | Path) -> Path:
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise CaptionError(f"folder '{folder}' does not exist")
    return path.resolve()


def list_images(folder: str | Path, recursive: bool = False) -> list[Path]:
    """The folder's training images and clips (masks and hidden files left out), sorted; none is opened."""
    return list_image_files(_folder(folder), recursive, clips=True)


def index_captions(root: Path, recursive: bool) -> dict[str, str]:
    """The folder's captions.json / metadata.jsonl captions (data/caption_index.py), one a line, by
    image path: training reads them for an image without a caption file, so the editor shows them,
    and an edit (or a bulk operation) writes them, changed, to the image's .txt. An index that
    cannot be read shows nothing here (the run names it)."""
    from ..data.caption_index import read_caption_index
    from ..data.errors import DataError

    try:
        index = read_caption_index(root, recursive)
    except DataError:
        return {}
    return {} if index is None else {path: "\n".join(captions) for path, captions in index.by_path.items()}


def page_of(folder: str | Path, page: int = 1, page_size: int = 24, recursive: bool = False) -> CaptionPage:
    root = _folder(folder)
    images = list_image_files(root, recursive, clips=True)
    size = max(1, int(page_size))
    pages = max(1, -(-len(images) // size))
    number = min(max(1, int(page or 1)), pages)
    shown = images[(number - 1) * size: number * size]
    indexed = index_captions(root, recursive)
    items = []
    for image in shown:
        has = caption_file(image).is_file()
        name = image.relative_to(root).as_posix()
        items.append(CaptionItem(image, name, read_caption(image) if has else indexed.get(name, ""), has))
    return CaptionPage(root, items, number, pages, len(images), size)


def thumbnail(image: Path, cache_dir: Path, size: int = THUMB_SIZE) -> Path | None:
    """A small cached copy of `image` for the grid (None if the image cannot be read). The key
    holds the path, size and mtime, so an edited image gets a new thumbnail."""
    from PIL import Image, ImageOps  # noqa: PLC0415

    from ..data.images import to_rgb  # noqa: PLC0415

    image = Path(image)
    try:
        stat = image.stat()
    except OSError:
        return None
    key = hashlib.sha1(f"{image.resolve()}|{stat.st_mtime_ns}|{stat.st_size}|{size}".encode()).hexdigest()
    target = Path(cache_dir) / key[:2] / f"{key}.jpg"
    if target.is_file():
        return target
    try:
        if is_video_name(image.name):  # a clip: its first frame
            from ..data.video import FrameSampling, read_clip  # noqa: PLC0415

            small = read_clip(image, FrameSampling(frames=1, step=1), 1)[0]
            small.thumbnail((size, size))
        else:
            with Image.open(image) as img:
                img.draft("RGB", (size, size))  # JPEG: decode at a reduced scale, much faster
                img.thumbnail((size, size))
                small = to_rgb(ImageOps.exif_transpose(img) or img)
        atomic_write(target, lambda tmp: small.save(tmp, format="JPEG", quality=85))
    except Exception:  # any unreadable image or clip: the grid shows it without a picture
        return None
    return target


# --- bulk operations ---------------------------------------------------------------------------
def split_tags(text: str) -> list[str]:
    """'a, b,,c ' -> ['a', 'b', 'c'], duplicates (case-insensitive) dropped."""
    seen: set[str] = set()
    out = []
    for tag in str(text or "").split(","):
        tag = tag.strip()
        if tag and tag.casefold() not in seen:
            seen.add(tag.casefold())
            out.append(tag)
    return out


@dataclass
class BulkOp:
    """One bulk operation. `files`: image names (relative to the folder) or paths; None = all."""

    kind: str
    find: str = ""
    replace: str = ""
    regex: bool = False
    text: str = ""
    files: list[str] | None = None
    recursive: bool = False
    _pattern: re.Pattern | None = field(default=None, init=False, repr=False)

    def check(self) -> None:
        if self.kind not in OPERATIONS:
            raise CaptionError(f"operation: '{self.kind}' is not one of {', '.join(OPERATIONS)}")
        if self.kind == "replace":
            if not self.find:
                raise CaptionError("find: give the text to look for")
            if self.regex:
                try:
                    self._pattern = re.compile(self.find)
                except re.error as err:
                    raise CaptionError(f"find: not a valid regular expression ({err})") from None
        elif self.kind in ("prefix", "suffix") and not self.text.strip():
            raise CaptionError(f"text: give the {self.kind} to add")
        elif self.kind in ("add_tags", "remove_tags") and not split_tags(self.text):
            raise CaptionError("tags: give one or more comma-separated tags")

    def describe(self) -> str:
        if self.kind == "replace":
            return f"replace {'regex ' if self.regex else ''}{self.find!r} with {self.replace!r}"
        return f"{self.kind.replace('_', ' ')} {self.text.strip()!r}"

    def transform(self, before: str | None) -> str | None:
        """The new caption text for `before` (None: no caption file); None means no change."""
        text = before or ""
        if self.kind == "replace":
            if before is None:
                return None
            after = self._pattern.sub(self.replace, text) if self._pattern else text.replace(self.find, self.replace)
        else:
            after = self._per_line(text)
        return None if after == text else after

    def _per_line(self, text: str) -> str:
        """Prefix, suffix and tags act on every caption (non-empty line); an empty file gets one."""
        lines = text.splitlines()
        if not any(line.strip() for line in lines):
            if self.kind == "remove_tags":
                return text
            lines = [""]
        out = [self._line(line) if line.strip() or len(lines) == 1 else line for line in lines]
        return "\n".join(out) + ("\n" if text.endswith("\n") else "")

    def _line(self, line: str) -> str:
        value = self.text.strip()
        body = line.strip()
        if self.kind == "prefix":
            return line if body.startswith(value) else (f"{value} {body}" if body else value)
        if self.kind == "suffix":
            return line if body.endswith(value) else (f"{body} {value}" if body else value)
        present = [t.strip() for t in body.split(",") if t.strip()]
        folded = {t.casefold() for t in present}
        if self.kind == "add_tags":
            missing = [t for t in split_tags(self.text) if t.casefold() not in folded]
            return line if not missing else ", ".join(([body.rstrip(", ")] if body else []) + missing)
        drop = {t.casefold() for t in split_tags(self.text)}
        if not folded & drop:
            return line
        return ", ".join(t for t in present if t.casefold() not in drop)


@dataclass(frozen=True)
class Change:
    image: Path
    name: str
    before: str | None  # None: the caption file does not exist yet
    after: str


def _targets(root: Path, op: BulkOp) -> list[Path]:
    images = list_image_files(root, op.recursive, clips=True)
    if op.files is None:
        return images
    wanted = set()
    for name in op.files:
        path = Path(name)
        path = (path if path.is_absolute() else root / path).resolve()
        if not path.is_relative_to(root):
            raise CaptionError(f"selection: '{name}' is not inside {root}")
        wanted.add(path)
    return [image for image in images if image.resolve() in wanted]


def preview(folder: str | Path, op: BulkOp) -> list[Change]:
    """The files `op` would change, with their text before and after; writes nothing."""
    op.check()
    root = _folder(folder)
    changes = []
    indexed = index_captions(root, op.recursive)
    for image in _targets(root, op):
        path = caption_file(image)
        # an image captioned by the folder's captions.json / metadata.jsonl: its captions are the text before
        before = read_text(path)[0] if path.is_file() else indexed.get(image.relative_to(root).as_posix())
        after = op.transform(before)
        if after is not None:
            changes.append(Change(image, image.relative_to(root).as_posix(), before, after))
    return changes


def apply(folder: str | Path, op: BulkOp) -> list[Change]:
    """Write `op`'s changes; the undo journal (exact previous bytes) is on disk before any write."""
    root = _folder(folder)
    changes = preview(root, op)
    if not changes:
        return []
    entries = []
    for change in changes:
        path = caption_file(change.image)
        old = path.read_bytes() if path.is_file() else None
        entries.append({"caption": path.relative_to(root).as_posix(), "before": None if old is None else base64.b64encode(old).decode()})
    atomic_write_json(journal_file(root), {"version": 1, "operation": op.describe(), "time": time.time(), "files": entries}, indent=1)
    for change in changes:
        _replace_bytes(caption_file(change.image), change.after.encode("utf-8"))
    return changes


def last_operation(folder: str | Path) -> str | None:
    """What `undo_last` would undo, or None."""
    path = journal_file(_folder(folder))
    if not path.is_file():
        return None
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("operation") or "?")
    except (ValueError, OSError):
        return None


def undo_last(folder: str | Path) -> tuple[str, list[Path]]:
    """Put back the exact bytes from before the last bulk operation (deleting captions it created);
    returns (its description, the caption files restored). The journal is removed afterwards."""
    root = _folder(folder)
    path = journal_file(root)
    if not path.is_file():
        raise CaptionError(f"nothing to undo in {root}: no bulk operation was applied here (or it was undone)")
    try:
        journal = json.loads(path.read_text(encoding="utf-8"))
        entries = [(root / e["caption"], None if e["before"] is None else base64.b64decode(e["before"])) for e in journal["files"]]
    except (ValueError, KeyError, TypeError) as err:
        raise CaptionError(f"undo journal {path} is damaged ({err}); the previous captions are in the .ot_captions/backup folders") from None
    restored = []
    for caption, data in entries:
        if not caption.resolve().is_relative_to(root):
            continue  # a hand-edited journal must not write outside the folder
        if _replace_bytes(caption, data):
            restored.append(caption)
    path.unlink()
    return str(journal.get("operation") or "?"), restored
