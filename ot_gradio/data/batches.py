"""A training batch, and turning planned samples into tensors (pixels or cached latents)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
import torch
from PIL import Image

from .buckets import Size
from .errors import DataError
from .images import load_alpha, load_depth, load_mask, load_rgb
from .latent_cache import LatentCache
from .mask_augment import rotate_crop, shrink_mask
from .pixels import mask_tensor, pixels_tensor
from .planning import PreparedConcept, Sample, Variant
from .scan import ImageItem
from .transform import render
from .video import ClipError, read_clip

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """One step's data. Exactly one of ``latents`` (latent caching on) or ``pixels`` is set.

    size: (height, width) in pixels, the same for every sample of the batch.
    latents: [B, C, height/8, width/8] as the VAE returned them.
    pixels: float32 [B, 3, height, width] in [-1, 1].
    mask: float32 [B, 1, height, width] in [0, 1] (1 = train on this pixel), None when no sample
        has a mask; samples without a mask get an all-ones mask when another one has one.
    conditioning_latents: inpainting models with latent caching and masked training: [B, 4, h, w]
        cached latents of each masked image (zeros for a sample without a mask file).
    control_pixels: image-conditioned families (Qwen-Image-Edit): float32 [B, 3, height, width] in
        [-1, 1], each sample's `-control` image cut, mirrored and colour-augmented like its image
        (with latent caching, `conditioning_latents` holds its latents too).
    depth_maps: depth models without latent caching, when a sample has a `-depth` map: float32
        [B, 1, height, width] in [0, 1] (white = near), each cut and mirrored like its image; NaN
        for a sample without one (its depth map is estimated). With latent caching the
        normalised maps are `conditioning_latents`.
    custom_conditioning: inpainting models with custom_conditioning_image, when a sample has a
        `-condlabel` image: bool [B], the samples whose conditioning image it is (their
        `conditioning_latents` are its latents; no mask is applied to it).
    condlabel_pixels: the same without latent caching: float32 [B, 3, height, width] in [-1, 1],
        each `-condlabel` image cut, mirrored and colour-augmented like its image (zeros for a
        sample without one).
    latent_mask: inpainting models: [B, 1, h, w], the mask the training step trains this batch
        with (it sets it; None = the whole image), which the model also takes as input.
    original_sizes: (height, width) of each sample's image as loaded (EXIF orientation applied), or of
        its mask rotate-and-crop cut; SDXL's size conditioning.
    crop_top_lefts: (top, left) of each sample's crop window in its image scaled to cover the
        bucket, counted from the mirrored edge when the sample is flipped; SDXL's crop conditioning.
    prior_prediction: bool [B], the samples of PRIOR_PREDICTION concepts, whose target is the base
        model's prediction (training/diffusion.py); None when the batch has none.
    image_embeds: Wan 2.1 I2V with latent caching: [B, tokens, width], the CLIP image embeddings
        of each clip's first frame, cached beside its first-frame latents (`conditioning_latents`).
    given_first_frame: bool [B], the clips that start from their own first frame this step, given
        clean (training/first_frame.py: a model with an image_to_video_share); set by the training
        step for the model's `predict`; None: none.
    """

    size: Size
    captions: list[str]
    loss_weights: torch.Tensor
    image_paths: list[str]
    latents: torch.Tensor | None = None
    pixels: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    conditioning_latents: torch.Tensor | None = None
    control_pixels: torch.Tensor | None = None
    depth_maps: torch.Tensor | None = None
    latent_mask: torch.Tensor | None = None
    custom_conditioning: torch.Tensor | None = None
    condlabel_pixels: torch.Tensor | None = None
    original_sizes: list[Size] | None = None
    crop_top_lefts: list[tuple[int, int]] | None = None
    prior_prediction: torch.Tensor | None = None
    given_first_frame: torch.Tensor | None = None
    image_embeds: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.captions)


def _reread(what: str, path, load, *args):
    """`load(path, *args)`: a file the scan read; one that cannot be read now is a DataError."""
    try:
        return load(path, *args)
    except Exception as exc:
        raise DataError(f"{what} {path} could not be read any more: {exc}") from exc


def render_pixels(item: ImageItem, variant: Variant) -> torch.Tensor:
    """[3, H, W] for an image of an image family, [3, frames, H, W] for a video family's item
    (an image: one frame); every frame of a clip is cut and augmented alike."""
    if item.sampling is not None:
        frames = _clip_frames(item, variant)
        return torch.stack([_fitted(_cut(img, item, variant), variant) for img in frames], dim=1)
    with _reread("image", item.path, load_rgb) as img:
        pixels = _fitted(_cut(img, item, variant), variant)
    return pixels.unsqueeze(1) if item.frames else pixels


def _clip_frames(item: ImageItem, variant: Variant) -> list[Image.Image]:
    """The frames of the variant's window; a moved window that the clip does not hold in full (its
    stated length was longer than its frames) is read from the run's clip start instead, said once."""
    if variant.clip_offset:
        moved = replace(item.sampling, start=item.sampling.start + variant.clip_offset)
        try:
            return read_clip(item.path, moved, item.frames)
        except ClipError as err:
            if item.path not in _SHORT_CLIPS:
                _SHORT_CLIPS.add(item.path)
                log.warning("Clip %s: the window at %.2f s %s; it trains with its first frames instead", item.path,
                            moved.start, err)
    return _reread("clip", item.path, read_clip, item.sampling, item.frames)


_SHORT_CLIPS: set = set()  # clips whose moved window fell short (warned once per process)


def _cut(img: Image.Image, item: ImageItem, variant: Variant, shrink: bool = False) -> Image.Image:
    """The image, or a file that goes with it (mapped onto the image's size first), after the mask
    augmentations (mask_augment.py): the mask's `shrink` to its disc, the rotate-and-crop cut."""
    draw = variant.augment.mask
    if draw is None:
        return img
    if img.size != (item.width, item.height):
        img = img.resize((item.width, item.height), Image.Resampling.BILINEAR)
    return rotate_crop(shrink_mask(img, draw) if shrink else img, draw)


def _fitted(img: Image.Image, variant: Variant) -> torch.Tensor:
    fitted = render(img, variant.crop, variant.bucket, variant.flip, angle=variant.augment.angle)
    return pixels_tensor(fitted, variant.augment)


def render_mask(item: ImageItem, variant: Variant) -> torch.Tensor | None:
    """The mask cut, mirrored and rotated exactly like its image (its own size is mapped onto the
    image's); colour changes do not apply to it."""
    if item.mask_path is None:
        return None
    with _reread("mask", item.mask_path, load_alpha if item.mask_from_alpha else load_mask) as mask:
        cut = _cut(mask, item, variant, shrink=True)
        return mask_tensor(render(cut, variant.crop, variant.bucket, variant.flip, Image.Resampling.BILINEAR, variant.augment.angle))


def render_control(item: ImageItem, variant: Variant) -> torch.Tensor | None:
    """The `-control` image as its image's pixels (its own size mapped onto the image's, as a mask)."""
    if item.control_path is None:
        return None
    with _reread("control image", item.control_path, load_rgb) as img:
        return _fitted(_cut(img, item, variant), variant)


def render_condlabel(item: ImageItem, variant: Variant) -> torch.Tensor | None:
    """The `-condlabel` image as its image's pixels (its own size mapped onto the image's, as a mask)."""
    if item.condlabel_path is None:
        return None
    with _reread("conditioning image", item.condlabel_path, load_rgb) as img:
        return _fitted(_cut(img, item, variant), variant)


def masked_image_input(item: ImageItem, variant: Variant) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(pixels, mask) that `encode_conditioning` makes an inpainting model's conditioning image of:
    the image and its mask, or its `-condlabel` image with a black mask (taken as it is)."""
    custom = render_condlabel(item, variant)
    if custom is not None:
        return custom, torch.zeros_like(custom[:1])
    return render_pixels(item, variant), render_mask(item, variant)


def render_depth(item: ImageItem, variant: Variant) -> torch.Tensor | None:
    """The `-depth` map [1, H, W] in [0, 1], resized, cut, mirrored and rotated exactly like its image
    (its own size mapped onto the image's, as a mask); None without one."""
    if item.depth_path is None:
        return None
    with _reread("depth map", item.depth_path, load_depth) as img:
        fitted = render(_cut(img, item, variant), variant.crop, variant.bucket, variant.flip, angle=variant.augment.angle)
    return torch.from_numpy(np.asarray(fitted, dtype=np.float32).copy()).unsqueeze(0)


def depth_maps(items: list[ImageItem], variants: list[Variant]) -> torch.Tensor | None:
    """[B, 1, H, W]: each item's rendered `-depth` map, NaN where it has none (its map is estimated);
    None when no item has one."""
    if all(item.depth_path is None for item in items):
        return None
    maps = [render_depth(item, variant) for item, variant in zip(items, variants, strict=True)]
    height, width = variants[0].bucket
    return torch.stack([m if m is not None else torch.full((1, height, width), float("nan")) for m in maps])


def original_size(item: ImageItem, variant: Variant) -> Size:
    """(height, width) of the image the sample was cut from: the image, or its mask rotate-and-crop cut."""
    draw = variant.augment.mask
    width, height = (item.width, item.height) if draw is None else draw.size(item.width, item.height)
    return height, width


def crop_top_left(variant: Variant) -> tuple[int, int]:
    """(top, left) of the window the model sees, in the scaled image it was cut from; a
    mirrored sample's left is counted from the mirrored image's left edge."""
    crop = variant.crop
    left = crop.scaled_w - variant.bucket[1] - crop.left if variant.flip else crop.left
    return crop.top, left


def latent_key(cache: LatentCache, item: ImageItem, variant: Variant, kind: str = "") -> str:
    """A video family's items also key on their frame count and, for a clip, the frame sampling;
    `kind` names another tensor made of the same pixels (a conditioning of every variant)."""
    extra = None
    if item.frames:
        extra = {"frames": item.frames, **({"sampling": item.sampling.key()} if item.sampling is not None else {})}
        if variant.clip_offset:  # a random clip window's start (absent at 0: the first window keys as before)
            extra["clip_offset"] = variant.clip_offset
    if kind:
        extra = {**(extra or {}), "kind": kind}
    return cache.key(
        item.path, item.file_size, item.mtime_ns, variant.bucket, variant.crop, variant.flip, variant.resolution, variant.augment, extra
    )


def conditioning_key(cache: LatentCache, item: ImageItem, variant: Variant, kind: str = "masked_image") -> str | None:
    """The cache key of an image's conditioning of `kind`: "masked_image" (inpainting models),
    None without a mask file: the image's variant plus the mask file, so an edited mask is
    encoded again; "depth" (depth models): every image's variant has its depth map, with the
    `-depth` file where there is one (else the estimator's); "control" (image-conditioned
    families): the variant plus the control file. An inpainting image with a `-condlabel` image
    (custom_conditioning_image) keys on that file instead of its mask; "first_frame" (image-to-video
    families): every variant, the latents of its first frame ("first_frame_clip": with its CLIP
    image embeddings, Wan 2.1 I2V)."""
    if kind in ("first_frame", "first_frame_clip"):
        return latent_key(cache, item, variant, kind)
    if kind == "control":
        return _with_file(cache, item, variant, "control", item.control_path)
    if kind == "depth":
        if item.depth_path is not None:
            return _with_file(cache, item, variant, "depth", item.depth_path)
        return cache.key(item.path, item.file_size, item.mtime_ns, variant.bucket, variant.crop, variant.flip, variant.resolution,
                         variant.augment, extra={"depth": "estimated"})
    if item.condlabel_path is not None:
        return _with_file(cache, item, variant, "condlabel", item.condlabel_path)
    return _with_file(cache, item, variant, "masked_image_alpha" if item.mask_from_alpha else "masked_image", item.mask_path)


def _with_file(cache: LatentCache, item: ImageItem, variant: Variant, kind: str, path) -> str | None:
    """The variant's key with a second file (a mask, a control image, a depth map) in it: editing that file
    encodes again. None without the file."""
    if path is None:
        return None
    try:
        stat = path.stat()
    except OSError as exc:
        raise DataError(f"{kind.replace('_', ' ')} file {path} could not be read any more: {exc}") from exc
    return cache.key(
        item.path, item.file_size, item.mtime_ns, variant.bucket, variant.crop, variant.flip, variant.resolution, variant.augment,
        extra={kind: [str(path), stat.st_size, stat.st_mtime_ns]},
    )


def make_batch(
    samples: list[Sample], concepts: list[PreparedConcept], cache: LatentCache | None, conditioning: str = ""
) -> Batch:
    """``conditioning``: the kind of cached conditioning to load too ("masked_image" for inpainting
    models, "depth" for depth models; "": none)."""
    items = [concepts[s.concept].items[s.item] for s in samples]
    height, width = samples[0].variant.bucket
    masks = [render_mask(item, s.variant) for item, s in zip(items, samples, strict=True)]
    mask = None
    if any(m is not None for m in masks):
        mask = torch.stack([m if m is not None else torch.ones(1, height, width) for m in masks])
    batch = Batch(
        size=(height, width),
        captions=[s.caption for s in samples],
        loss_weights=torch.tensor([concepts[s.concept].loss_weight for s in samples], dtype=torch.float32),
        image_paths=[str(item.path) for item in items],
        mask=mask,
        original_sizes=[original_size(item, s.variant) for item, s in zip(items, samples, strict=True)],
        crop_top_lefts=[crop_top_left(s.variant) for s in samples],
    )
    if any(concepts[s.concept].prior_prediction for s in samples):
        batch.prior_prediction = torch.tensor([concepts[s.concept].prior_prediction for s in samples])
    if any(item.control_path is not None for item in items):  # the text encoder reads them even with latent caching
        batch.control_pixels = torch.stack([render_control(item, s.variant) for item, s in zip(items, samples, strict=True)])
    if any(item.condlabel_path is not None for item in items):
        batch.custom_conditioning = torch.tensor([item.condlabel_path is not None for item in items])
        if cache is None:
            custom = [render_condlabel(item, s.variant) for item, s in zip(items, samples, strict=True)]
            batch.condlabel_pixels = torch.stack([c if c is not None else torch.zeros(3, height, width) for c in custom])
    if cache is not None:
        batch.latents = torch.stack([cache.load(latent_key(cache, item, s.variant), item.path)
                                     for item, s in zip(items, samples, strict=True)])
        if conditioning:
            keys = [conditioning_key(cache, item, s.variant, conditioning) for item, s in zip(items, samples, strict=True)]
            if conditioning == "first_frame_clip":  # every variant has both: its first frame's latents and CLIP embeddings
                entries = [cache.load_all(k, item.path) for k, item in zip(keys, items, strict=True)]
                batch.conditioning_latents = torch.stack([e["latent"] for e in entries])
                batch.image_embeds = torch.stack([e["image_embeds"] for e in entries])
            else:
                batch.conditioning_latents = torch.stack(
                    [cache.load(k, item.path) if k else torch.zeros_like(latent)
                     for k, item, latent in zip(keys, items, batch.latents, strict=True)]
                )
    else:
        batch.pixels = torch.stack([render_pixels(item, s.variant) for item, s in zip(items, samples, strict=True)])
        batch.depth_maps = depth_maps(items, [s.variant for s in samples])  # a depth model's step reads them beside the pixels
    return batch
