"""Atomic writes: a crash mid-write leaves the old file (or nothing) and a hidden temp file,
never a file that looks complete but is not.

Every writer makes a temp file `.{name}.<random>.tmp` in the target's own folder (so the rename
stays on one filesystem), fsyncs it, renames it over the target with `os.replace` and fsyncs the
folder so the rename itself survives a power cut. Pure Python (no torch): the config package and
the page import it.

A write that fails for lack of space (ENOSPC or a quota, also when a library such as torch or
safetensors reports it in its own words) raises `DiskFullError` naming the path, the space free and
the space needed, after removing its temp file: nothing half-written is left behind.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "BACKUP_MARKER", "DiskFullError", "as_disk_full", "atomic_write", "atomic_write_bytes", "atomic_write_dir", "atomic_write_json",
    "atomic_write_text", "free_bytes", "fsync_dir", "fsync_file", "human_bytes", "remove_stale_temps", "tree_size",
]

# Written last into a backup folder (training/backup.py): a folder that has it is complete. Declared
# here, below both, so the runner and the page read it without importing the trainer (torch).
BACKUP_MARKER = "COMPLETE"
FILE_MODE = 0o644
_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
# How libraries word ENOSPC when they do not raise it as an OSError (safetensors' Rust io error,
# torch's PyTorchStreamWriter): sure signs, and vague ones that count only when the disk is full.
_SURE_FULL = ("no space left on device", "storagefull", "os error 28", "disk quota exceeded", "errno 28")
_VAGUE_WRITE_FAILURE = ("unexpected pos", "failed writing file", "file write failed", "write failed")
LOW_SPACE = 64 * 1024 * 1024  # a vague write failure with less than this free is taken as a full disk


class DiskFullError(OSError):
    """A write failed because its disk (or quota) is full. ``path`` is what was being written,
    ``free`` the bytes free there now (None if unknown), ``needed`` about how many the write needs
    (None if unknown). An expected error: the message says what to do, no traceback is needed."""

    expected = True

    def __init__(self, path: str | os.PathLike, free: int | None = None, needed: int | None = None, what: str = "",
                 at_least: bool = False, hint: str = ""):
        self.path, self.free, self.needed = Path(path), free, needed
        space = []
        if needed is not None:
            space.append(f"{'more than' if at_least else 'about'} {human_bytes(needed)} needed")
        if free is not None:
            space.append(f"{human_bytes(free)} free")
        detail = f" ({', '.join(space)})" if space else ""
        super().__init__(
            errno.ENOSPC,
            f"disk full: could not write {what or 'the file'} {self.path}{detail}. Free some disk space on that drive "
            f"or choose a folder on another drive, then start again{hint}",
        )

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self):  # keeps the fields and the message through pickling (multiprocessing)
        return (_rebuild, (type(self), self.path, self.free, self.needed, self.strerror))


def _rebuild(cls: type, path: Path, free: int | None, needed: int | None, message: str) -> DiskFullError:
    err = cls(path, free, needed)
    err.strerror = message
    return err


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"  # not reached


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes free for this user on the filesystem holding `path` (or its nearest existing parent)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def tree_size(path: str | os.PathLike) -> int:
    """Bytes in a file, or in all files under a folder (0 if it is gone)."""
    p = Path(path)
    try:
        if p.is_file():
            return p.stat().st_size
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    except OSError:
        return 0


def _is_disk_full(err: BaseException, free: int | None, needed: int | None) -> bool:
    if isinstance(err, DiskFullError):
        return True
    if isinstance(err, OSError) and err.errno in _FULL_ERRNOS:
        return True
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        return False
    chain, seen = [err], set()
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if id(nxt) in seen:
            break
        seen.add(id(nxt))
        chain.append(nxt)
    for e in chain:
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return True
        text = str(e).lower()
        if any(s in text for s in _SURE_FULL):
            return True
        if free is not None and any(s in text for s in _VAGUE_WRITE_FAILURE):
            return free < max(needed or 0, LOW_SPACE)
    return False


def as_disk_full(err: BaseException, path: str | os.PathLike, needed: int | None = None, what: str = "",
                 free_at_failure: int | None = None, at_least: bool = False, hint: str = "") -> DiskFullError | None:
    """`err` as a DiskFullError for `path` if it means the disk is full, else None. ``needed``:
    about how many bytes the write needs; ``free_at_failure``: the free bytes measured before the
    temp files were removed (judges libraries' vague "write failed"); the message shows the free
    bytes now."""
    if isinstance(err, DiskFullError):
        return err
    free_then = free_at_failure if free_at_failure is not None else free_bytes(path)
    if not _is_disk_full(err, free_then, needed):
        return None
    return DiskFullError(path, free_bytes(path), needed, what, at_least, hint)


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a written file's data to disk; errors are raised (data may be lost)."""
    # Windows can only flush a handle opened for writing; POSIX any handle.
    fd = os.open(path, os.O_RDWR if os.name == "nt" else os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename or a new file in it) to disk.

    Best effort: some platforms and filesystems (Windows, some network and FUSE mounts) cannot
    open or fsync a folder; there this does nothing.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _cleanup_and_raise(err: BaseException, path: Path, tmp: Path, needed: int | None, what: str) -> None:
    """Remove the temp file or folder `tmp`; raise DiskFullError if `err` means a full disk."""
    written = tree_size(tmp)
    free_then = free_bytes(path.parent)
    if tmp.is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.unlink(missing_ok=True)
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        return
    at_least = needed is None
    full = as_disk_full(err, path, needed if needed is not None else (written or None), what, free_then, at_least)
    if full is not None and full is not err:
        raise full from err


STALE_TEMP_SECONDS = 3600.0  # a temp file untouched this long belongs to a write that died
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.(tmp|old)")


def _newest_mtime(path: Path) -> float:
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for root, _dirs, files in os.walk(path):
            for name in files:
                try:
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
                except OSError:
                    pass
    return newest


def remove_stale_temps(folder: str | os.PathLike, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
    """Remove what writes that died left in `folder` (our `.{name}.<random>.tmp` files and folders,
    `.old` folders of a swap), once nothing has written in them for `older_than` seconds: a write
    still going on (another run saving the same file) is left be."""
    removed: list[Path] = []
    try:
        candidates = [Path(e.path) for e in os.scandir(folder) if e.name.startswith(".") and _TEMP_NAME.fullmatch(e.name)]
    except OSError:
        return removed
    now = time.time()
    for p in candidates:
        try:
            if now - _newest_mtime(p) < older_than:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p)
        except OSError:
            continue
    return removed


_swept: dict[str, float] = {}  # folder -> when this process last swept it


def _sweep(folder: Path) -> None:
    """remove_stale_temps at the first write into `folder`, then at most every few minutes (a
    folder of 10,000 captions is not listed at each of their writes)."""
    key, now = str(folder), time.monotonic()
    if now - _swept.get(key, -1e9) < 300:
        return
    _swept[key] = now
    remove_stale_temps(folder)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None], *, needed: int | None = None, what: str = "") -> Path:
    """Call `write(temp_path)` for a temp file next to `path`, fsync it, then rename it over `path`.

    Parent folders are made; the final file has mode 0o644. If anything fails (including
    `write`) the temp file is removed, an existing `path` is left untouched, and the error is
    raised again, as a DiskFullError when the disk is full (``needed``: the bytes the file needs,
    if known; ``what``: how the message names the file, e.g. "the LoRA").
    """
    path = Path(path)
    _sweep(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        full = as_disk_full(err, path, needed, what)
        if full is not None:
            raise full from err
        raise
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        fsync_file(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException as err:
        _cleanup_and_raise(err, path, tmp, needed, what)
        raise
    fsync_dir(path.parent)
    return path


def replace_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to a temp file next to `path` and rename it over `path`, without fsync: for
    caches, whose files can be made again. A crash never leaves a partly written file under the
    final name; after a power cut a file may be empty or short, which the cache's readers treat as
    missing."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        full = as_disk_full(err, path, len(data))
        if full is not None:
            raise full from err
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException as err:
        _cleanup_and_raise(err, path, Path(tmp), len(data), "")
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes, what: str = "") -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data), needed=len(data), what=what)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8", what: str = "") -> Path:
    return atomic_write_bytes(path, text.encode(encoding), what=what)


def atomic_write_json(path: str | os.PathLike, data: Any, **json_kwargs: Any) -> Path:
    """`data` as JSON text (UTF-8, a trailing newline); `json_kwargs` go to `json.dumps`."""
    return atomic_write_text(path, json.dumps(data, **json_kwargs) + "\n")


def atomic_write_dir(path: str | os.PathLike, write: Callable[[Path], None], *, needed: int | None = None, what: str = "") -> Path:
    """Call `write(temp_dir)` for a temp folder next to `path`, fsync its files, then swap it in.

    An existing folder is moved aside first and removed only after the new one is in place; if
    anything fails the temp folder is removed and the old folder put back (a full disk raises
    DiskFullError, as `atomic_write`).
    """
    path = Path(path)
    _sweep(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as err:
        full = as_disk_full(err, path, needed, what)
        if full is not None:
            raise full from err
        raise
    old = None
    try:
        write(tmp)
        for file in tmp.rglob("*"):
            if file.is_file():
                fsync_file(file)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException as err:
        try:
            _cleanup_and_raise(err, path, tmp, needed, what)
        finally:
            if old is not None and not path.exists():
                os.replace(old / path.name, path)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return path


def numbered(dest: str, n: int) -> str:
    """`models/name.safetensors` -> `models/name-2.safetensors`; a folder `out/name` -> `out/name-2`
    (the name a run gets when an earlier run's model has its own: runner/outputs.py)."""
    path = Path(dest)
    return str(path.with_name(f"{path.stem}-{n}{path.suffix}"))


def same_output(path: str, dest: str) -> bool:
    """`path` is the output file `dest`, or one of its numbered names (`numbered`)."""
    def key(value: str) -> Path:
        try:
            return Path(value).expanduser().resolve()
        except (OSError, ValueError, RuntimeError):
            return Path(value)

    if not str(path or "").strip() or not str(dest or "").strip():
        return False
    got, want = key(str(path)), key(str(dest))
    return got == want or (got.parent == want.parent and got.suffix == want.suffix
                           and re.fullmatch(re.escape(want.stem) + r"-\d+", got.stem) is not None)
