"""Which folders the page may use, and the checks every path it takes goes through. No
gradio, no torch: the browser widget (browser.py), the tools and config load/save call these.

The roots are fixed when the app starts (launch.py): the workspace, the folder the app was
started in and each --browse-root. Nothing typed in the page adds one: a concept folder is read
by training, but the page lists, reads, writes and serves only inside the roots.

A path is resolved (``..`` collapsed, symlinks followed) before it is compared with the roots,
so neither ``../..``, an absolute path elsewhere nor a symlink pointing out of a root reaches a
folder outside them. Below a root, hidden names (``.ssh``, ``.config``, ``.env``) and the
secrets file are refused: a home folder used as a root keeps its keys and tokens.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SECRET_NAMES = frozenset({"secrets.json"})  # the workspace's token file (ot_gradio/secrets.py)
ROOT_FLAG = "--browse-root"


class PathRefused(ValueError):
    """A path resolving outside every allowed root, or to a hidden or secret file inside one."""


@dataclass(frozen=True)
class Entry:
    path: Path  # resolved
    name: str  # as listed in its folder
    is_dir: bool


def _resolved(path: str | os.PathLike, base: Path) -> Path:
    p = Path(os.path.expanduser(str(path).strip()))
    return (p if p.is_absolute() else base / p).resolve()


def allowed_roots(workspace: str | os.PathLike, extra: Iterable[str | os.PathLike] = (),
                  base: Path | None = None) -> list[Path]:
    """The app's workspace and the launcher's extra roots (the start folder, --browse-root);
    each resolved, existing, and listed once. Never a value from the page or a config."""
    base = Path.cwd() if base is None else base
    found: list[Path] = [_resolved(workspace, base)]
    found += [_resolved(p, base) for p in extra if str(p).strip()]
    out: list[Path] = []
    for root in found:
        if root.is_dir() and root not in out:
            out.append(root)
    return out


def root_of(path: Path, roots: Iterable[Path]) -> Path | None:
    """The allowed root holding the resolved `path`, or None."""
    inside = [r for r in roots if path == r or path.is_relative_to(r)]
    return max(inside, key=lambda r: len(r.parts)) if inside else None


def private_part(path: Path, root: Path) -> str | None:
    """The first name of `path` below `root` that the page never touches: a hidden one
    (".ssh", ".env") or the secrets file; None if there is none."""
    for name in path.relative_to(root).parts:
        if name.startswith(".") or name in SECRET_NAMES:
            return name
    return None


def check(path: str | os.PathLike, roots: list[Path], base: Path | None = None) -> Path:
    """The resolved path if it lies inside an allowed root; PathRefused otherwise. The one check
    for every path the page takes: the file browser, the tools, config load/save and presets."""
    if not str(path).strip():
        raise PathRefused("empty path")
    try:  # a NUL byte, a name too long, a symlink loop
        resolved = _resolved(path, Path.cwd() if base is None else base)
    except (ValueError, OSError, RuntimeError) as err:
        raise PathRefused(f"{str(path)[:200]!r} is not a usable path ({err})") from None
    root = root_of(resolved, roots)
    if root is None:
        raise PathRefused(f"{path} is outside the folders this page may use ({', '.join(map(str, roots)) or 'none'}); "
                          f"to use another folder here, start the app with {ROOT_FLAG} FOLDER")
    private = private_part(resolved, root)
    if private is not None:
        raise PathRefused(f"{path}: the page does not use hidden or secret files and folders ({private!r})")
    return resolved


def start_folder(value: str, roots: list[Path], base: Path | None = None) -> Path | None:
    """Where browsing starts for a field holding `value`: the folder itself, or the folder of a
    file (or of a file still to be written), if that is inside a root; else None (the roots)."""
    if not str(value or "").strip():
        return None
    try:
        path = check(value, roots, base)
    except PathRefused:
        return None
    while not path.is_dir():
        if root_of(path.parent, roots) is None:
            return None
        path = path.parent
    return path


def parent(folder: Path, roots: list[Path]) -> Path | None:
    """One level up, or None (the list of roots) when that leaves every root."""
    if folder.parent == folder or root_of(folder.parent, roots) is None:
        return None
    return folder.parent


def list_folder(folder: str | os.PathLike, roots: list[Path], files: bool = True, base: Path | None = None) -> list[Entry]:
    """Sub-folders (then files, if asked) of an allowed folder, sorted by name. Hidden entries
    and symlinks leading out of the roots are not listed."""
    resolved = check(folder, roots, base)
    if not resolved.is_dir():
        raise PathRefused(f"{folder} is not a folder")
    dirs: list[Entry] = []
    plain: list[Entry] = []
    try:
        names = sorted(os.listdir(resolved), key=str.lower)
    except OSError as err:
        raise PathRefused(f"{folder}: {err.strerror or err}") from None
    for name in names:
        if name.startswith(".") or name in SECRET_NAMES:
            continue
        target = (resolved / name).resolve()
        if root_of(target, roots) is None:
            continue
        if target.is_dir():
            dirs.append(Entry(target, name, True))
        elif files and target.is_file():
            plain.append(Entry(target, name, False))
    return dirs + plain
