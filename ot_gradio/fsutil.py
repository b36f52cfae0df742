"""Atomic writes: a crash mid-write leaves the old file (or nothing) and a hidden temp file,
never a file that looks complete but is not.

Every writer makes a temp file `.{name}.<random>.tmp` in the target's own folder (so the rename
stays on one filesystem), fsyncs it, renames it over the target with `os.replace` and fsyncs the
folder so the rename itself survives a power cut. Pure Python (no torch): the config package and
the page import it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_dir", "atomic_write_json", "atomic_write_text", "fsync_dir", "fsync_file"]

FILE_MODE = 0o644


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


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call `write(temp_path)` for a temp file next to `path`, fsync it, then rename it over `path`.

    Parent folders are made; the final file has mode 0o644. If anything fails (including
    `write`) the temp file is removed, an existing `path` is left untouched, and the error is
    raised again.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        fsync_file(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def replace_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to a temp file next to `path` and rename it over `path`, without fsync: for
    caches, whose files can be made again. A crash never leaves a partly written file under the
    final name; after a power cut a file may be empty or short, which the cache's readers treat as
    missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike, data: Any, **json_kwargs: Any) -> Path:
    """`data` as JSON text (UTF-8, a trailing newline); `json_kwargs` go to `json.dumps`."""
    return atomic_write_text(path, json.dumps(data, **json_kwargs) + "\n")


def atomic_write_dir(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call `write(temp_dir)` for a temp folder next to `path`, fsync its files, then swap it in.

    An existing folder is moved aside first and removed only after the new one is in place; if
    anything fails the temp folder is removed and the old folder put back.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not path.exists():
            os.replace(old / path.name, path)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return path
