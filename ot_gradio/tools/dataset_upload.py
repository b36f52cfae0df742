"""Training files uploaded through the page into a concept's folder (Concepts tab, *Upload images*).

A user of a share link (a rented GPU box) or of Colab has the images on their own computer, not
on the machine that trains; the page takes them, loose or in .zip archives, and writes them
into a folder of the workspace (`datasets/<concept name>`), which becomes the concept's folder.
Torch-free: the page imports it. Decisions:

- Kept: what a concept reads (images, clips, `.txt` captions or kohya's `.caption`; masks and `-control` / `-depth` /
  `-condlabel` images go by their names). Names are written as training looks for them: a
  caption's `.TXT` as `.txt` beside `IMG_1.JPG`, a mask's `-MaskLabel.PNG` as `-masklabel.png`.
  Anything else (a PDF, an archive inside an archive) is skipped and named; hidden files and
  operating-system clutter (.DS_Store, macOS's `__MACOSX` folder) are skipped and counted.
- A .zip is read member by member: no member is written outside the folder (absolute paths and
  `..` are refused), one top folder holding everything is dropped (zipping `mycat/` gives the
  files of `mycat`), subfolders are kept. Before anything is written, an upload whose archives
  would unpack to more than MAX_UNPACKED (or than the disk holds above its last GiB), hold more
  than MAX_MEMBERS entries, or hold a member packed more than MAX_RATIO:1 (a zip bomb: 1 MB
  unpacking to 1 GiB of zeros) is refused whole. The sizes checked are the ones the archive
  declares, and Python's zipfile never unpacks a member past its declared size; what is written
  is counted again as it is written, and the upload stops before the disk's last GiB.
- Nothing is lost: every file is written whole (temp file, then renamed) and none is overwritten.
  A file already in the folder with the same bytes is skipped (uploading again adds nothing); an
  image whose name is taken by another picture goes in with its caption, mask and companions
  under the next free name (`1.png` -> `1-2.png`, `1-2.txt`); a caption that replaces a different
  one keeps the previous version in `.ot_captions/backup/`, as the caption editor does.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from ..config.media_files import CAPTION_EXTENSIONS, IMAGE_EXTENSIONS, UNREAD_IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from ..data.caption_index import INDEX_FILES
from ..data.images import CONDLABEL_SUFFIX, CONTROL_SUFFIX, DEPTH_SUFFIX, MASK_SUFFIX
from ..fsutil import DiskFullError, atomic_write, atomic_write_bytes, free_bytes, human_bytes
from .captions import backup_file

DATASETS = "datasets"  # the workspace's folder of uploaded datasets
COMPANION_SUFFIXES = (MASK_SUFFIX, CONTROL_SUFFIX, DEPTH_SUFFIX, CONDLABEL_SUFFIX)
JUNK_NAMES = frozenset({"__macosx", "thumbs.db", "desktop.ini"})
MAX_MEMBERS = 100_000  # entries (files and folders) in one archive
DISK_RESERVE = 1024 ** 3  # an upload stops before the disk's last GiB
MAX_UNPACKED = 20 * 1024 ** 3  # what an upload's archives unpack to, together
MAX_RATIO = 200  # a member's unpacked size to its packed size (images pack a little: PNG and JPEG are packed already)...
RATIO_FROM = 4 * 1024 ** 2  # ...for a member bigger than this (a caption or a small blank mask packs better)
MAX_NAMES = 8  # file names listed in a summary line


class UploadError(ValueError):
    """Something the user can fix before anything is written: an unreadable archive, one of too many files."""


@dataclass
class Incoming:
    """One file to add: its path in the dataset ('/'-separated) and how to read it."""

    rel: PurePosixPath
    open: Callable[[], IO[bytes]]
    source: str  # the upload it came from (an archive's name, or "" for loose files)


@dataclass
class UploadResult:
    folder: Path
    written: list[str] = field(default_factory=list)  # dataset paths written
    same: list[str] = field(default_factory=list)  # already in the folder with the same bytes
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (uploaded name, name written) of taken names
    captions_replaced: list[str] = field(default_factory=list)  # previous version in .ot_captions/backup
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, why)
    clutter: int = 0  # hidden files and operating-system clutter (__MACOSX, .DS_Store, Thumbs.db), not named
    unpacked: int = 0  # bytes the upload's archives declare, so far
    stopped: str = ""  # why the upload stopped before its end ("" = it did not)

    def count(self, kind: str) -> int:
        """Written files of one kind: "image", "clip", "caption", "mask" or "companion"."""
        return sum(1 for rel in self.written if file_kind(rel) == kind)

    @property
    def in_subfolders(self) -> bool:
        return any("/" in rel and file_kind(rel) in ("image", "clip") for rel in [*self.written, *self.same])


def file_kind(name: str) -> str:
    """"caption", "mask", "companion", "image", "clip", "archive", "unread" (a picture training
    does not read: JPEG XL, PSD, RAW) or "other"."""
    path = PurePosixPath(name)
    ext = path.suffix.lower()
    if ext in CAPTION_EXTENSIONS or path.name in INDEX_FILES:  # (a folder's captions.json / metadata.jsonl: its captions)
        return "caption"
    if ext in IMAGE_EXTENSIONS or ext in VIDEO_EXTENSIONS:
        companion = _companion_suffix(path.stem)
        if companion == MASK_SUFFIX:
            return "mask"
        if companion:
            return "companion"
        return "image" if ext in IMAGE_EXTENSIONS else "clip"
    if ext == ".zip":
        return "archive"
    return "unread" if ext in UNREAD_IMAGE_EXTENSIONS else "other"


def _companion_suffix(stem: str) -> str:
    low = stem.lower()
    return next((s for s in COMPANION_SUFFIXES if low.endswith(s) and len(low) > len(s)), "")


def _split_companion(stem: str) -> tuple[str, str]:
    """(base name, companion suffix in lower case or ""): `cat-MaskLabel` -> ("cat", "-masklabel")."""
    suffix = _companion_suffix(stem)
    return stem[: len(stem) - len(suffix)], suffix


def _group_key(rel: PurePosixPath) -> tuple[str, str]:
    """(folder, base name) shared by an image and its caption, mask and companions."""
    return str(rel.parent), _split_companion(rel.stem)[0]


def _renamed(rel: PurePosixPath, base: str, new_base: str) -> PurePosixPath:
    return rel.with_name(new_base + rel.stem[len(base):] + rel.suffix)


def _as_training_reads(rel: PurePosixPath, kind: str) -> PurePosixPath:
    """The name training looks for: a caption's `.TXT` as `.txt` (beside `IMG_1.JPG` it reads
    `IMG_1.txt`), a mask's or companion's suffix in lower case and a mask's `.PNG` as `.png`
    (`IMG_1-masklabel.png`)."""
    if kind == "caption":
        return rel.with_suffix(rel.suffix.lower())
    if kind in ("mask", "companion"):
        base, suffix = _split_companion(rel.stem)
        return rel.with_name(base + suffix + (rel.suffix.lower() if suffix == MASK_SUFFIX else rel.suffix))
    return rel


def safe_rel(name: str) -> PurePosixPath | str:
    """A member or file name as a path inside the dataset, or why it is not taken."""
    if "\x00" in name:
        return "a name with a NUL character"
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if ".." in parts:
        return "a path leaving the folder ('..')"
    if not parts:
        return "no file name"
    if any(p.lower() in JUNK_NAMES for p in parts):
        return "operating-system clutter"
    if any(p.startswith(".") for p in parts):
        return "a hidden file"
    return PurePosixPath(*parts)


# --- reading the uploads ------------------------------------------------------------------------
CLUTTER = ("operating-system clutter", "a hidden file")  # skipped without being named


def _archive_members(path: Path, result: UploadResult, stack: contextlib.ExitStack) -> Iterator[Incoming]:
    try:
        archive = stack.enter_context(zipfile.ZipFile(path))
    except (zipfile.BadZipFile, OSError) as err:
        raise UploadError(f"{path.name} is not a readable .zip archive ({err}); nothing of it was added") from None
    _check_sizes(path, archive.infolist(), result)
    infos = [i for i in archive.infolist() if not i.is_dir()]
    named: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
    for info in infos:
        rel = safe_rel(info.filename)
        if isinstance(rel, str):
            _skip(result, f"{path.name}: {info.filename}", rel)
        else:
            named.append((info, rel))
    # one top folder holding everything (a zipped folder): its files go in the dataset's top
    strip = len({rel.parts[0] for _, rel in named}) == 1 and all(len(rel.parts) > 1 for _, rel in named)
    for info, rel in named:
        yield Incoming(PurePosixPath(*rel.parts[1:]) if strip else rel, lambda info=info: archive.open(info), path.name)


def _check_sizes(path: Path, infos: list[zipfile.ZipInfo], result: UploadResult) -> None:
    """UploadError before anything is written when archive `path` holds too many entries, a
    member packed like a zip bomb, or more than the upload may unpack (its archives together)."""
    if len(infos) > MAX_MEMBERS:
        raise UploadError(f"{path.name} holds {len(infos):,} entries, more than the {MAX_MEMBERS:,} an upload takes; "
                          "split it. Nothing was added")
    free = free_bytes(result.folder)
    limit = MAX_UNPACKED if free is None else max(0, min(MAX_UNPACKED, free - DISK_RESERVE))
    for info in infos:
        if info.file_size > RATIO_FROM and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise UploadError(f"{path.name}: {info.filename} unpacks to {human_bytes(info.file_size)} from "
                              f"{human_bytes(info.compress_size)}, more than the {MAX_RATIO}:1 an upload takes "
                              "(a zip bomb packs so; a picture does not). Nothing was added")
        result.unpacked += info.file_size
        if result.unpacked > limit:
            why = (f"the {human_bytes(MAX_UNPACKED)} an upload takes" if limit == MAX_UNPACKED else
                   f"the {human_bytes(limit)} the disk can take (an upload leaves {human_bytes(DISK_RESERVE)} free)")
            raise UploadError(f"{path.name} unpacks to more than {why}; upload it in parts. Nothing was added")


def _skip(result: UploadResult, name: str, why: str) -> None:
    if why in CLUTTER:
        result.clutter += 1
    else:
        result.skipped.append((name, why))


def incoming_files(uploads: list[Path], result: UploadResult, stack: contextlib.ExitStack) -> Iterator[Incoming]:
    """The files of `uploads` (loose files keep their name; archives give their members, read
    while `stack` is open), with the ones training does not read skipped into `result`."""
    for upload in uploads:
        upload = Path(upload)
        if file_kind(upload.name) == "archive":
            members = _archive_members(upload, result, stack)
        else:
            rel = safe_rel(upload.name)
            if isinstance(rel, str):
                _skip(result, upload.name, rel)
                continue
            members = iter([Incoming(rel, lambda upload=upload: upload.open("rb"), "")])
        for item in members:
            kind = file_kind(item.rel.name)
            where = f"{item.source}: {item.rel}" if item.source else str(item.rel)
            if kind == "archive":
                result.skipped.append((where, "an archive inside an archive (upload it on its own)"))
            elif kind == "unread":
                result.skipped.append((where, "a picture format training does not read (save it as PNG or JPG)"))
            elif kind == "other":
                result.skipped.append((where, "not a training file"))
            else:
                item.rel = _as_training_reads(item.rel, kind)
                yield item


# --- writing ----------------------------------------------------------------------------------
class _Budget:
    """Bytes the upload may still write: the disk's free space above DISK_RESERVE."""

    def __init__(self, folder: Path):
        free = free_bytes(folder)
        self.left = None if free is None else free - DISK_RESERVE
        self.folder = folder

    def full(self, name: str, needed: int) -> DiskFullError:
        return DiskFullError(self.folder / name, free_bytes(self.folder), needed, "the uploaded file", at_least=True,
                             hint=f" (an upload leaves {human_bytes(DISK_RESERVE)} free)")

    def take(self, n: int, name: str) -> None:
        if self.left is not None:
            if n > self.left:
                raise self.full(name, n)
            self.left -= n


def _digest(stream: IO[bytes], budget: _Budget | None = None, name: str = "") -> tuple[str, int]:
    """(sha256, size) of a stream read to its end; past what `budget` has left (an archive member
    that unpacks to more than the disk can take) the disk is full."""
    h, n = hashlib.sha256(), 0
    with stream:
        while chunk := stream.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
            if budget is not None and budget.left is not None and n > budget.left:
                raise budget.full(name, n)
    return h.hexdigest(), n


def _copy(item: Incoming, target: Path, size: int, budget: _Budget) -> None:
    budget.take(size, str(item.rel))

    def write(tmp: Path) -> None:
        with item.open() as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)

    atomic_write(target, write, needed=size, what="the uploaded file")


def add_uploads(uploads: list[Path], folder: Path) -> UploadResult:
    """Adds the training files of `uploads` (files and .zip archives) to `folder` (made if
    missing); see the module's notes for what is kept, skipped and renamed. An unreadable
    archive, or one over the limits on what it unpacks to, raises UploadError before anything is
    written."""
    folder = Path(folder)
    result = UploadResult(folder)
    with contextlib.ExitStack() as stack:
        groups: dict[tuple[str, str, str], list[Incoming]] = {}
        for item in incoming_files(uploads, result, stack):
            groups.setdefault((item.source, *_group_key(item.rel)), []).append(item)
        folder.mkdir(parents=True, exist_ok=True)
        budget = _Budget(folder)
        try:
            for (_, _, base), items in groups.items():
                _add_group(items, base, folder, result, budget)
        except DiskFullError as err:
            result.stopped = str(err)
    return result


def _add_group(items: list[Incoming], base: str, folder: Path, result: UploadResult, budget: _Budget) -> None:
    """An image with its caption, mask and companions (or a caption alone): under its own name
    unless another picture holds it, then under the first free one."""
    try:
        digests = {id(item): _digest(item.open(), budget, str(item.rel)) for item in items}
    except DiskFullError:
        raise
    except (OSError, EOFError, RuntimeError, zipfile.BadZipFile, zlib.error) as err:  # a damaged or encrypted member
        result.skipped.extend((f"{item.source}: {item.rel}" if item.source else str(item.rel), f"unreadable ({err})") for item in items)
        return

    def state(rel: PurePosixPath, item: Incoming) -> str:
        target = folder / rel
        if not target.exists():
            return "free"
        if not target.is_file():
            return "taken"
        same = target.stat().st_size == digests[id(item)][1] and _digest(target.open("rb")) == digests[id(item)]
        return "same" if same else "taken"

    media = [item for item in items if file_kind(item.rel.name) != "caption"]
    new_base = base
    for n in range(1, 10_000):
        new_base = base if n == 1 else f"{base}-{n}"
        if all(state(_renamed(item.rel, base, new_base), item) != "taken" for item in media):
            break
    for item in items:
        rel = _renamed(item.rel, base, new_base)
        now = state(rel, item)
        if now == "same":
            result.same.append(str(rel))
            continue
        target = folder / rel
        if now == "taken":  # only a caption gets here: replaced, the previous one kept
            if not target.is_file():
                result.skipped.append((str(item.rel), f"a folder named {rel.name} is in the way"))
                continue
            atomic_write_bytes(backup_file(target), target.read_bytes())
            result.captions_replaced.append(str(rel))
        if new_base != base:
            result.renamed.append((str(item.rel), str(rel)))
        _copy(item, target, digests[id(item)][1], budget)
        result.written.append(str(rel))


# --- the folder and the summary -----------------------------------------------------------------
def folder_name(name: str) -> str:
    """A concept's name as a folder name: letters, digits, '-', '_' and '.' (others as '_')."""
    cleaned = re.sub(r"[^\w.-]+", "_", name.strip(), flags=re.UNICODE).strip("._")
    return cleaned[:80] or "concept"


def upload_folder(workspace: Path, concept_path: str, concept_name: str) -> Path:
    """Where a concept's uploads go: its folder when that is already one of the workspace's
    uploaded datasets, else a new folder `datasets/<name>` (`<name>-2`, ... when taken)."""
    root = (Path(workspace) / DATASETS).resolve()
    if concept_path:
        current = Path(concept_path).expanduser().resolve()  # relative: to the working folder, as training reads it
        if current.parent == root or root in current.parents:
            return current
    base = folder_name(concept_name)
    for n in range(1, 10_000):
        candidate = root / (base if n == 1 else f"{base}-{n}")
        if not candidate.exists() or (candidate.is_dir() and not any(candidate.iterdir())):
            return candidate
    raise UploadError(f"no free folder name for '{base}' in {root}")


def _names(items: list[str]) -> str:
    shown = ", ".join(f"`{n}`" for n in items[:MAX_NAMES])
    return shown + (f" and {len(items) - MAX_NAMES} more" if len(items) > MAX_NAMES else "")


def summary(result: UploadResult, shown_folder: str) -> str:
    """The upload's outcome as the page shows it (Markdown)."""
    counts = [(result.count(k), k) for k in ("image", "clip", "caption", "mask", "companion")]
    added = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in counts if n)
    lines = [f"**Added to `{shown_folder}`:** {added or 'no new file'}."]
    if result.same:
        lines.append(f"Already there with the same content, not added again: {len(result.same)} file(s).")
    if result.renamed:
        lines.append("Names taken by another picture, added under a new name: "
                     + _names([f"{a} → {b}" for a, b in result.renamed]).replace("`", "") + ".")
    if result.captions_replaced:
        lines.append(f"Captions replaced (the previous ones are in `.ot_captions/backup`): {_names(result.captions_replaced)}.")
    if result.clutter:
        lines.append(f"Skipped {result.clutter} hidden or operating-system file(s) (`__MACOSX`, `.DS_Store`, ...).")
    if result.skipped:
        by_reason: dict[str, list[str]] = {}
        for name, why in result.skipped:
            by_reason.setdefault(why, []).append(name)
        lines.extend(f"Skipped, {why}: {_names(names)}." for why, names in by_reason.items())
    if result.stopped:
        lines.append(f"**Stopped before the end:** {result.stopped}. The files listed as added are complete.")
    return "\n\n".join(lines)
