"""The caching phase before training: encode every variant any epoch can need, once.

Variants already on disk are not encoded again, so epoch 2 and a second run with the same data
run the VAE zero times, and adding one image encodes only that image's variants.

With ``threads`` > 0 the encoder never waits for files: the next chunks' images are decoded and
cut in that many threads (`data/prefetch.py`, at most two chunks ahead per thread) while the
current chunk encodes, and finished latents are written by one writer thread (at most
``_WRITES_AHEAD`` chunks queued). Threads change when a chunk is read or written, never what it
holds: the same latents are stored with 0 threads or 8. An error in any thread stops the phase
and is raised here; latents already written stay valid (each file is written atomically). Latents
with NaN or inf (a float16 VAE that overflows) stop the phase before their chunk is stored.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from .batches import conditioning_key, depth_maps, latent_key, masked_image_input, render_control, render_pixels
from .errors import DataError
from .latent_cache import LatentCache, nonfinite_error, nonfinite_rows
from .planning import PreparedConcept, Variant
from .prefetch import prefetched
from .scan import ImageItem

EncodeFn = Callable[[torch.Tensor], torch.Tensor]
# (pixels [B, 3, H, W] in [-1, 1], mask [B, 1, H, W]) -> masked-image latents (inpainting models);
# depth models: (pixels, the `-depth` maps [B, 1, H, W] with NaN rows, or None) -> depth maps at latent size
# (a Wan 2.1 I2V clip's: {"latent": first-frame latents, "image_embeds": its CLIP embeddings}, one file per variant)
ConditioningFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor | Mapping[str, torch.Tensor]]
ProgressFn = Callable[[int, int], None]
Chunk = list[tuple[str, ImageItem, Variant]]  # (cache key, image, variant), one bucket
_WRITES_AHEAD = 4


@dataclass
class CacheReport:
    total: int = 0  # distinct variants needed
    hits: int = 0  # found on disk
    encoded: int = 0  # variants encoded now
    encode_calls: int = 0  # calls to encode_fn
    conditioning_total: int = 0  # masked-image latents needed (inpainting models)
    conditioning_hits: int = 0
    conditioning_encoded: int = 0


def fill_cache(
    concepts: list[PreparedConcept],
    cache: LatentCache,
    encode_fn: EncodeFn,
    encode_batch_size: int = 4,
    progress: ProgressFn | None = None,
    conditioning_fn: ConditioningFn | None = None,
    threads: int = 0,
    conditioning_kind: str = "masked_image",
) -> CacheReport:
    """``conditioning_fn``: cache the masked-image latents of every variant with a mask file too (its
    `-condlabel` image's where it has one, custom_conditioning_image)
    (``conditioning_kind`` "depth": the depth map of every variant, `conditioning_fn(pixels, its
    `-depth` maps or None)`, NaN rows to estimate; "control":
    the latents of each variant's control image, `conditioning_fn(control pixels, None)`).
    ``threads``: decode images in that many threads and write latents in one more (0: all here)."""
    needed: dict[str, tuple[ImageItem, Variant]] = {}
    needed_conditioning: dict[str, tuple[ImageItem, Variant]] = {}
    for concept in concepts:
        for index, item in enumerate(concept.items):
            for variant in concept.cached_variants(index):
                needed.setdefault(latent_key(cache, item, variant), (item, variant))
                key = conditioning_key(cache, item, variant, conditioning_kind) if conditioning_fn is not None else None
                if key is not None:
                    needed_conditioning.setdefault(key, (item, variant))

    report = CacheReport(total=len(needed), conditioning_total=len(needed_conditioning))
    total = report.total + report.conditioning_total
    done = 0
    _tell(progress, done, total)
    # by bucket and frame count: a chunk is one tensor
    missing: dict[tuple[tuple[int, int], int], list[tuple[str, ImageItem, Variant]]] = {}
    missing_conditioning: dict[tuple[tuple[int, int], int], list[tuple[str, ImageItem, Variant]]] = {}
    for wanted, absent in ((needed, missing), (needed_conditioning, missing_conditioning)):
        for key, (item, variant) in wanted.items():
            if cache.has(key):
                if wanted is needed:
                    report.hits += 1
                else:
                    report.conditioning_hits += 1
                done += 1
                if done % 256 == 0:
                    _tell(progress, done, total)
            else:
                absent.setdefault((variant.bucket, variant.frames), []).append((key, item, variant))
    _tell(progress, done, total)

    step = max(1, int(encode_batch_size))
    chunks = [(group[i : i + step], False) for _, group in sorted(missing.items()) for i in range(0, len(group), step)]
    chunks += [(group[i : i + step], True) for _, group in sorted(missing_conditioning.items()) for i in range(0, len(group), step)]
    writes: deque[Future] = deque()
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ot-cache-write") if threads > 0 else None

    def store(chunk: Chunk, latents: torch.Tensor | Mapping[str, torch.Tensor]) -> None:
        for index, (key, _, _) in enumerate(chunk):
            cache.put(key, {name: t[index] for name, t in latents.items()} if isinstance(latents, Mapping) else latents[index])

    try:
        for index, (pixels, masks) in prefetched(_Rendered(chunks, conditioning_kind), threads=threads):
            chunk, conditioning = chunks[index]
            with torch.no_grad():
                latents = conditioning_fn(pixels, masks) if conditioning else encode_fn(pixels)
            parts = list(latents.values()) if isinstance(latents, Mapping) and conditioning else [latents]
            if not parts or any(not isinstance(t, torch.Tensor) or t.shape[0] != len(chunk) for t in parts):
                got = [tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in parts]
                raise DataError(f"encode_fn returned {got} for {len(chunk)} images; expected a tensor with one latent per image")
            if bad := nonfinite_rows(latents):  # nothing of the chunk is stored: a NaN latent is never trained on
                control = conditioning and conditioning_kind == "control"
                images = [item.control_path if control else item.path for _, item, _ in (chunk[i] for i in bad)]
                what = f"{conditioning_kind.replace('_', ' ')} conditioning" if conditioning else "latents"
                raise nonfinite_error(images, cache.nonfinite_hint, what, cached=True)
            if writer is None:
                store(chunk, latents)
            else:
                writes.append(writer.submit(store, chunk, latents))
                while len(writes) > _WRITES_AHEAD or (writes and writes[0].done()):
                    writes.popleft().result()  # a failed write stops the phase here
            if conditioning:
                report.conditioning_encoded += len(chunk)
            else:
                report.encode_calls += 1
                report.encoded += len(chunk)
            done += len(chunk)
            _tell(progress, done, total)
        while writes:
            writes.popleft().result()
    finally:
        if writer is not None:
            writer.shutdown(wait=True, cancel_futures=True)
    return report


class _Rendered:
    """Chunk ``i``'s pixels (and masks, for a conditioning chunk of kind "masked_image"; the `-depth`
    maps in their place for one of kind "depth" (data/batches.py depth_maps); a "control"
    chunk's pixels are the control images), decoded when asked for."""

    def __init__(self, chunks: list[tuple[Chunk, bool]], kind: str = "masked_image"):
        self.chunks, self.kind = chunks, kind

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        chunk, conditioning = self.chunks[index]
        if conditioning and self.kind == "masked_image":  # each image and mask, or its -condlabel image
            pairs = [masked_image_input(item, variant) for _, item, variant in chunk]
            return torch.stack([p for p, _ in pairs]), torch.stack([m for _, m in pairs])
        render = render_control if conditioning and self.kind == "control" else render_pixels
        pixels = torch.stack([render(item, variant) for _, item, variant in chunk])
        masks = None
        if conditioning and self.kind == "depth":
            masks = depth_maps([item for _, item, _ in chunk], [variant for _, _, variant in chunk])
        return pixels, masks


def _tell(progress: ProgressFn | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)
