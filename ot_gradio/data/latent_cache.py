"""Latents on disk, keyed by content, so a cached latent is reused across epochs and runs.

The key is a sha256 over everything that changes the latent: the file (absolute path, size,
mtime), what was cut out of it (resolution, bucket, crop window, flip), the rotation, colour and
mask augmentation draws baked into it (only when there are any, so a cache made before
augmentation existed stays valid), the VAE (``vae_id``, from the caller) and ``PIXEL_PIPELINE_VERSION`` (bumped when image
loading or resizing changes), and for tensors other than an image's own latent what else went
into them (``extra``: the mask file of an inpainting model's masked image). Editing or touching an
image changes its key; adding an image adds keys; changing an augmentation setting changes the
keys of the variants it changes. The model's ``vae_id`` includes the type of the VAE's weights, the
type it encodes in: a run that switches a float16 VAE to FLOAT_32 encodes again.

A NaN or inf latent is never trained on: caching refuses to store one (`nonfinite_rows`,
`nonfinite_error`: the images, and the caller's ``nonfinite_hint`` on the VAE's type), and a
cached entry that holds one is refused when read.

Files are ``<cache_dir>/<key[:2]>/<key>.safetensors``, written atomically (temp file, fsync,
rename), so a crash never leaves a file that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ot_gradio.fsutil import atomic_write_bytes

from .augment import Augment
from .buckets import Size
from .cache_files import clear_entries, entry_path
from .errors import DataError
from .transform import CropBox

log = logging.getLogger(__name__)

PIXEL_PIPELINE_VERSION = 1
# what a caller that knows nothing of the VAE says after NaN or inf latents (the trainer says more: training/vae_advice.py)
NONFINITE_HINT = "check that the image opens and looks right, and use FLOAT_32 for the VAE's weight data type"


def nonfinite_rows(latents: torch.Tensor | Mapping[str, torch.Tensor]) -> list[int]:
    """The rows (images) of a batch of latents, or of any tensor of several, holding NaN or inf."""
    tensors = list(latents.values()) if isinstance(latents, Mapping) else [latents]
    bad: set[int] = set()
    for t in tensors:
        if t.is_floating_point() and not t.is_meta:
            finite = torch.isfinite(t)
            rows = finite.flatten(1).all(1) if finite.dim() > 1 else finite.reshape(-1)
            bad.update((~rows).nonzero().flatten().tolist())
    return sorted(bad)


def nonfinite_error(images: Sequence[str | Path], hint: str = "", what: str = "latents", cached: bool = False) -> DataError:
    """The error for NaN or inf `what` made from `images` (`cached`: by the caching phase, which stored nothing for them)."""
    shown = ", ".join(str(i) for i in images[:3]) + (f" and {len(images) - 3} more" if len(images) > 3 else "")
    stored = f" (nothing was cached for {'it' if len(images) == 1 else 'them'})" if cached else ""
    return DataError(f"encoding {shown} made NaN or inf {what}, which cannot be trained on{stored}: {hint or NONFINITE_HINT}")


def cache_key(
    path: str | Path,
    file_size: int,
    mtime_ns: int,
    bucket: Size,
    crop: CropBox,
    flip: bool,
    resolution: Size,
    vae_id: str,
    augment: Augment | None = None,
    extra: Mapping | None = None,
) -> str:
    """``extra``: more that changes the tensor (e.g. the mask of an inpainting model's masked
    image); only keys with it can match, so entries made without it are never taken for it."""
    payload = {
        "path": str(Path(path).absolute()),
        "size": int(file_size),
        "mtime_ns": int(mtime_ns),
        "bucket": [int(v) for v in bucket],
        "crop": [crop.top, crop.left, crop.scaled_h, crop.scaled_w],
        "flip": bool(flip),
        "resolution": [int(v) for v in resolution],
        "vae": str(vae_id),
        "pipeline": PIXEL_PIPELINE_VERSION,
    }
    if augment is not None and not augment.identity:
        payload["augment"] = augment.key()
    if extra:
        payload["extra"] = dict(extra)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


class LatentCache:
    """A folder of cached latents for one VAE. Counters: ``hits`` / ``misses`` (lookups through
    ``get`` and ``has``) and ``encodes`` (latents stored with ``put``). ``nonfinite_hint``: what
    to tell the user when the VAE makes NaN or inf latents (its type and what to change)."""

    def __init__(self, cache_dir: str | Path, vae_id: str, nonfinite_hint: str = ""):
        self.cache_dir = Path(cache_dir)
        self.vae_id = str(vae_id)
        self.nonfinite_hint = nonfinite_hint
        self.hits = 0
        self.misses = 0
        self.encodes = 0

    def key(
        self,
        path: str | Path,
        file_size: int,
        mtime_ns: int,
        bucket: Size,
        crop: CropBox,
        flip: bool,
        resolution: Size,
        augment: Augment | None = None,
        extra: Mapping | None = None,
    ) -> str:
        return cache_key(path, file_size, mtime_ns, bucket, crop, flip, resolution, self.vae_id, augment, extra)

    def path_for(self, key: str) -> Path:
        return entry_path(self.cache_dir, key)

    def _valid(self, path: Path) -> bool:
        try:
            with safe_open(str(path), framework="pt") as f:
                return "latent" in f.keys()
        except Exception:
            return False

    def has(self, key: str) -> bool:
        """Is a readable latent stored under ``key``? Reads only the file header."""
        path = self.path_for(key)
        found = path.is_file() and self._valid(path)
        if found:
            self.hits += 1
        else:
            self.misses += 1
        return found

    def get(self, key: str) -> torch.Tensor | None:
        tensor = self._read(key)
        if tensor is None:
            self.misses += 1
        else:
            self.hits += 1
        return tensor

    def load(self, key: str, image: str | Path = "") -> torch.Tensor:
        """Read a latent the caching phase stored (no counting) for `image`. Raises DataError if
        gone, or if it holds NaN or inf (caching never stores one: a file written or damaged elsewhere)."""
        tensor = self._read(key)
        if tensor is None:
            raise DataError(f"cached latent {self.path_for(key)} is missing or unreadable; was the cache folder cleared during training?")
        self._refuse_nonfinite(key, image, {"latent": tensor})
        return tensor

    def load_all(self, key: str, image: str | Path = "") -> dict[str, torch.Tensor]:
        """Every tensor of an entry `put` stored as several (a Wan 2.1 I2V clip's first-frame
        latents, "latent", and its CLIP image embeddings); raises DataError as `load`."""
        tensors = self._read(key, whole=True)
        if tensors is None:
            raise DataError(f"cached latent {self.path_for(key)} is missing or unreadable; was the cache folder cleared during training?")
        self._refuse_nonfinite(key, image, tensors)
        return tensors

    def _refuse_nonfinite(self, key: str, image: str | Path, tensors: Mapping[str, torch.Tensor]) -> None:
        if nonfinite_rows({name: t.unsqueeze(0) for name, t in tensors.items()}):
            path = self.path_for(key)
            raise nonfinite_error([image or path], f"the cached entry {path} holds them (turn on 'Clear cache before training' "
                                                   f"to encode the images again); {self.nonfinite_hint or NONFINITE_HINT}")

    def _read(self, key: str, whole: bool = False):
        path = self.path_for(key)
        try:
            tensors = st_load(path.read_bytes())
            return tensors if whole else tensors["latent"]
        except FileNotFoundError:
            return None
        except Exception as exc:
            log.warning("Ignoring unreadable cache file %s: %s", path, exc)
            return None

    def put(self, key: str, tensor: torch.Tensor | Mapping[str, torch.Tensor]) -> Path:
        """One latent, or several tensors of one variant in one file (their names; "latent" among them)."""
        tensors = dict(tensor) if isinstance(tensor, Mapping) else {"latent": tensor}
        if "latent" not in tensors:
            raise ValueError(f"a cache entry holds a 'latent'; got {sorted(tensors)}")
        data = st_save({name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}, metadata={"vae_id": self.vae_id})
        path = atomic_write_bytes(self.path_for(key), data, what="a cached latent (the cache needs room for every image)")
        self.encodes += 1
        return path

    def clear(self) -> int:
        """Delete the cached latents (only files this class writes); returns how many."""
        return clear_entries(self.cache_dir)
