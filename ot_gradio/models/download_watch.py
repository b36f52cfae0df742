"""What a base model's first load downloads, said while it happens.

A run's first load of a hub model downloads it: 7 GB for SDXL, over 30 GB for Flux.1 with its T5.
The libraries' download bars go to the run's log only, so the page said "loading <model>" for
minutes with nothing moving, and a new user on a rented box took the run for hung. While the
model loads, `DownloadWatch` looks every few seconds at how many bytes the hub cache holds (its
files and the `.incomplete` ones being written, by huggingface_hub's HTTP or Xet download; links
not followed) and, when that grew, reports it as the run's status: "loading <model>: 3.2 GB
downloaded, 45.0 MB/s" (the run bar shows its short form). A load that downloads nothing reports
nothing. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..fsutil import human_bytes

EVERY_S = 5.0  # how often the cache is measured while a model loads


def cache_bytes(folder: str | os.PathLike) -> int:
    """Bytes of the regular files under `folder` (symbolic links, the hub's snapshot entries, not
    followed: each file counted once); 0 when it does not exist."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue  # renamed (an .incomplete file finished) or removed between the listing and here
            if not stat.S_ISLNK(info.st_mode):
                total += info.st_size
    return total


def hub_cache_folder(cache_dir: str | None) -> Path:
    """The hub cache the run downloads into: its `huggingface_cache_dir`, else huggingface_hub's."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    from huggingface_hub import constants  # noqa: PLC0415

    return Path(constants.HF_HUB_CACHE)


class DownloadWatch:
    """A context manager around a model's load: every `every` seconds the cache's growth since the
    start goes to `report(message, detail)` (detail: the short form the run bar shows); on leaving,
    the total, when there was one (no detail: the download is over)."""

    def __init__(self, report: Callable[[str, str], None], label: str, folder: str | os.PathLike, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.report, self.label, self.folder, self.clock = report, label, Path(folder), clock
        self.every = EVERY_S if every is None else every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.start_bytes = 0
        self.last_bytes = 0
        self.started = 0.0

    def __enter__(self) -> DownloadWatch:
        self.start_bytes = self.last_bytes = cache_bytes(self.folder)
        self.started = self.clock()
        self._thread = threading.Thread(target=self._watch, name="ot-download-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        grown = cache_bytes(self.folder) - self.start_bytes
        if grown > 0 and exc[0] is None:
            took = max(self.clock() - self.started, 1e-6)
            self.report(f"loading {self.label}: downloaded {human_bytes(grown)} in {took:.0f} s", "")

    def _watch(self) -> None:
        previous_time = self.clock()
        while not self._stop.wait(self.every):
            now_bytes, now = cache_bytes(self.folder), self.clock()
            if now_bytes > self.last_bytes:
                rate = (now_bytes - self.last_bytes) / max(now - previous_time, 1e-6)
                detail = f"{human_bytes(now_bytes - self.start_bytes)} downloaded, {human_bytes(int(rate))}/s"
                self.report(f"loading {self.label}: {detail}", detail)
            self.last_bytes, previous_time = max(now_bytes, self.last_bytes), now


def watch_downloads(report: Callable[[str, str], None], label: str, cache_dir: str | None,
                    offline: bool = False) -> contextlib.AbstractContextManager:
    """A DownloadWatch of the hub cache a load uses, or nothing to watch when it may not download
    (offline mode, the config's or huggingface_hub's)."""
    from huggingface_hub import constants  # noqa: PLC0415

    if offline or constants.HF_HUB_OFFLINE:
        return contextlib.nullcontext()
    return DownloadWatch(report, label, hub_cache_folder(cache_dir))
