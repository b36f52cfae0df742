"""Which folders the page's file browser may show, and the checks every browse request goes
through. No gradio, no torch: the browser widget (browser.py) only calls these.

A browse request is a path typed or picked in the page. It is resolved (``..`` collapsed,
symlinks followed) before it is compared with the allowed roots, so neither ``../..``, an
absolute path elsewhere nor a symlink pointing out of a root can list a folder outside them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class PathRefused(ValueError):
    """A browse request resolving outside every allowed root."""


@dataclass(frozen=True)
class Entry:
    path: Path  # resolved
    name: str  # as listed in its folder
    is_dir: bool


def _resolved(path: str | os.PathLike, base: Path) -> Path:
    p = Path(os.path.expanduser(str(path).strip()))
    return (p if p.is_absolute() else base / p).resolve()


def allowed_roots(workspace: str | os.PathLike, extra: Iterable[str | os.PathLike] = (),
                  config: dict[str, Any] | None = None, base: Path | None = None) -> list[Path]:
    """The app's workspace, the launcher's extra roots, and the config's concept folders; each
    resolved, existing, and listed once. A concept folder that is a filesystem root ("/") is
    left out: a config typed or imported in the page must not open the whole disk."""
    base = Path.cwd() if base is None else base
    found: list[Path] = [_resolved(workspace, base)]
    found += [_resolved(p, base) for p in extra if str(p).strip()]
    for concept in (config or {}).get("concepts") or []:
        path = str(concept.get("path") or "").strip()
        if path:
            resolved = _resolved(path, base)
            if resolved != Path(resolved.anchor):
                found.append(resolved)
    out: list[Path] = []
    for root in found:
        if root.is_dir() and root not in out:
            out.append(root)
    return out


def root_of(path: Path, roots: Iterable[Path]) -> Path | None:
    """The allowed root holding the resolved `path`, or None."""
    inside = [r for r in roots if path == r or path.is_relative_to(r)]
    return max(inside, key=lambda r: len(r.parts)) if inside else None


def check(path: str | os.PathLike, roots: list[Path], base: Path | None = None) -> Path:
    """The resolved path if it lies inside an allowed root; PathRefused otherwise. The one check
    for every path the page takes: the file browser, the tools, config load/save and presets."""
    if not str(path).strip():
        raise PathRefused("empty path")
    try:  # a NUL byte, a name too long, a symlink loop
        resolved = _resolved(path, Path.cwd() if base is None else base)
    except (ValueError, OSError, RuntimeError) as err:
        raise PathRefused(f"{str(path)[:200]!r} is not a usable path ({err})") from None
    if root_of(resolved, roots) is None:
        raise PathRefused(f"{path} is outside the folders this page may use ({', '.join(map(str, roots)) or 'none'})")
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
        if name.startswith("."):
            continue
        target = (resolved / name).resolve()
        if root_of(target, roots) is None:
            continue
        if target.is_dir():
            dirs.append(Entry(target, name, True))
        elif files and target.is_file():
            plain.append(Entry(target, name, False))
    return dirs + plain
