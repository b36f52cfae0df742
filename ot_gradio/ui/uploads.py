"""What the page keeps of uploads: at most UPLOADS_TOTAL_BYTES together, none older than a day.

Gradio stores every upload (a config import, the mask editor's layers) in its cache folder and
records it in `Blocks.upload_file_set`; left alone it keeps them all until the app stops (200
uploads of 0.9 MB: 180 MB kept). The page's handlers read an upload when it arrives, so older
ones are safe to delete: past the total, the oldest go first (never those of the upload being
recorded), and gradio's own `delete_cache` removes any older than UPLOAD_MAX_AGE_S."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

UPLOADS_TOTAL_BYTES = 512 * 1024 * 1024
UPLOAD_MAX_AGE_S = 24 * 3600
DELETE_CACHE = (3600, UPLOAD_MAX_AGE_S)  # gr.Blocks(delete_cache=...): every hour, what is older than a day


class CappedUploads(set):
    """Gradio's record of uploaded files that deletes the oldest once they pass `cap` bytes."""

    def __init__(self, files: Iterable[str] = (), cap: int = UPLOADS_TOTAL_BYTES):
        super().__init__(files)
        self.cap = cap

    def update(self, *others: Iterable[Any]) -> None:
        new = {str(f) for other in others for f in other}
        super().update(*[set(other) for other in others])
        self.enforce(keep=new)

    def enforce(self, keep: set[str] = frozenset()) -> list[str]:
        """Delete the oldest recorded uploads (not those in `keep`) until the total fits `cap`."""
        found = []
        for name in list(self):
            try:
                info = os.stat(name)
            except OSError:
                continue
            found.append((info.st_mtime, info.st_size, str(name)))
        total = sum(size for _, size, _ in found)
        removed = []
        for _, size, name in sorted(found):
            if total <= self.cap:
                break
            if name in keep:
                continue
            if not _remove(name):
                continue
            self.discard(name)
            total -= size
            removed.append(name)
        if removed:
            log.info("removed %d old uploads (the page keeps at most %d MB of them)", len(removed), self.cap // 2**20)
        return removed


def bound_uploads(blocks: Any, cap: int = UPLOADS_TOTAL_BYTES) -> None:
    """Put a CappedUploads in place of the page's `upload_file_set` (also in `temp_file_sets`,
    where gradio's delete_cache finds it)."""
    old = blocks.upload_file_set
    capped = CappedUploads(old, cap)
    blocks.upload_file_set = capped
    blocks.temp_file_sets = [capped if s is old else s for s in blocks.temp_file_sets]


def _remove(name: str | os.PathLike) -> bool:
    """Delete one of gradio's uploads and its folder (gradio's one folder per upload, then empty)."""
    try:
        os.remove(name)
    except OSError:
        return False
    try:
        Path(name).parent.rmdir()
    except OSError:
        pass
    return True


def forget_uploads(files: Iterable[str | os.PathLike] | None) -> None:
    """Delete gradio's cached copies of uploads a handler has taken in (a whole dataset would
    otherwise stay on disk twice); only files inside gradio's upload cache."""
    from gradio.utils import get_upload_folder  # noqa: PLC0415

    cache = Path(get_upload_folder()).resolve()
    for name in files or []:
        if cache in Path(name).resolve().parents:
            _remove(name)
