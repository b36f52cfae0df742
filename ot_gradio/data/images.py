"""Opening training images and masks as plain 8-bit RGB / greyscale.

Decisions, so every model sees the same pixels:
- EXIF orientation is applied, so an image trains the way every viewer shows it.
- Transparent pixels (RGBA, LA, palette or colour-key transparency) are composited onto white.
  Cut-outs, stickers and line art are drawn to be seen on a light page; dropping alpha instead
  would expose whatever colour the editor left under the transparent pixels (often black).
- 16-bit and 32-bit greyscale is scaled to 8 bits (PIL's own conversion clips it to white).
- CMYK, YCbCr, palette and other modes go through PIL's conversion to RGB (no ICC handling).
- HEIC / HEIF (an iPhone's photos) open through pillow-heif's PIL plugin, registered on import
  here, with the container's rotation applied as it decodes (its EXIF orientation then reads 1).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from ..config.media_files import HEIF_EXTENSIONS, IMAGE_EXTENSIONS

try:  # in requirements.txt; a box set up with only what a GPU check needs may lack it
    import pillow_heif
except ImportError:
    pillow_heif = None
else:
    pillow_heif.register_heif_opener()

# Pixel limits, set on purpose: training opens what PIL itself opens (its refusal threshold, about
# 13,400 x 13,400); the page (mask editor, previews) at most about 6,000 x 6,000, since it holds
# several copies of an image and sends it to the browser (a 9400x9400 PNG of 257 KB took 2.2 GB).
MAX_PIXELS = 2 * 89_478_485
PAGE_MAX_PIXELS = 36_000_000
Image.MAX_IMAGE_PIXELS = MAX_PIXELS // 2
MASK_SUFFIX = "-masklabel"
# an image-conditioned family's source image beside each training image (`cat.png` + `cat-control.png`)
CONTROL_SUFFIX = "-control"
# a depth model's depth map beside a training image (`cat.png` + `cat-depth.png`): grey, white = near
DEPTH_SUFFIX = "-depth"
# an inpainting model's own conditioning image beside a training image (custom_conditioning_image),
# used instead of the masked image; never a training image itself, as in OneTrainer
CONDLABEL_SUFFIX = "-condlabel"
BACKGROUND = (255, 255, 255)  # under a training image's transparent pixels
MASK_BACKGROUND = (0, 0, 0)  # under a mask's: not trained

_HIGH_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")


def is_image_name(name: str) -> bool:
    return Path(name).suffix.lower() in IMAGE_EXTENSIONS


def is_mask_name(name: str) -> bool:
    return Path(name).stem.lower().endswith(MASK_SUFFIX)


def is_companion_name(name: str, suffix: str) -> bool:
    """An image named `<stem><suffix>.<ext>`: a file that goes with another image (`-control`, `-depth`)."""
    return is_image_name(name) and Path(name).stem.lower().endswith(suffix)


def companion_path_for(image_path: Path, suffix: str) -> Path | None:
    """``cat.jpg`` -> ``cat<suffix>.<any image extension>`` beside it, the first that exists (None: none)."""
    for ext in IMAGE_EXTENSIONS:
        for case in (ext, ext.upper()):
            path = image_path.with_name(image_path.stem + suffix + case)
            if path.is_file():
                return path
    return None


def is_condlabel_name(name: str) -> bool:
    return is_companion_name(name, CONDLABEL_SUFFIX)


def is_control_name(name: str) -> bool:
    return is_companion_name(name, CONTROL_SUFFIX)


def is_depth_name(name: str) -> bool:
    return is_companion_name(name, DEPTH_SUFFIX)


def mask_path_for(image_path: Path) -> Path:
    """``photo.jpg`` -> ``photo-masklabel.png`` (OneTrainer's naming)."""
    return image_path.with_name(image_path.stem + MASK_SUFFIX + ".png")


def _high_bit_top(img: Image.Image, arr: np.ndarray) -> float:
    """The value that is white in a high-bit image: 1 (a float image within [0, 1]), 65535 or 255."""
    if img.mode == "F" and arr.size and float(arr.max()) <= 1.0:
        return 1.0
    if img.mode.startswith("I;16") or (arr.size and float(arr.max()) > 255):
        return 65535.0
    return 255.0


def _high_bit_to_l(img: Image.Image) -> Image.Image:
    arr = np.asarray(img, dtype=np.float64)
    out = np.clip(arr * (255.0 / _high_bit_top(img, arr)) + 0.5, 0, 255).astype(np.uint8)
    return Image.fromarray(out, "L")


def to_rgb(img: Image.Image, background: tuple[int, int, int] = BACKGROUND) -> Image.Image:
    """Any PIL image -> 8-bit RGB, alpha composited onto `background` (white)."""
    if img.mode in _HIGH_BIT_MODES:
        img = _high_bit_to_l(img)
    if img.mode in ("P", "L", "RGB") and "transparency" in img.info:
        img = img.convert("RGBA")
    elif img.mode == "PA":
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "RGBa", "LA", "La"):
        rgba = img.convert("RGBA")
        under = Image.new("RGBA", rgba.size, tuple(background) + (255,))
        return Image.alpha_composite(under, rgba).convert("RGB")
    if img.mode == "RGB":
        return img
    return img.convert("RGB")


def to_mask(img: Image.Image) -> Image.Image:
    """Any PIL image -> an 8-bit greyscale mask (white = train). Transparency counts as black
    (luminance times alpha), as OneTrainer and the mask editor read a mask painted on a
    transparent layer; an image without alpha reads as its luminance."""
    return to_rgb(img, MASK_BACKGROUND).convert("L")


def _alpha_channel(img: Image.Image) -> Image.Image | None:
    """The image's alpha channel (a palette or colour key made one), or None without one."""
    if img.mode in ("P", "L", "RGB") and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode not in ("RGBA", "RGBa", "LA", "La", "PA"):
        return None
    return img.getchannel(len(img.getbands()) - 1)


def has_transparency(img: Image.Image) -> bool:
    """Whether any pixel is less than opaque (an alpha channel that is opaque everywhere is none)."""
    alpha = _alpha_channel(img)
    return alpha is not None and alpha.getextrema()[0] < 255


class ImageTooLargeError(ValueError):
    """An image with more pixels than we open (a decompression bomb: a small file that decodes
    to gigabytes); the message names the file and the limit."""


def check_pixels(size: tuple[int, int], name: str, max_pixels: int) -> None:
    width, height = size
    if width * height > max_pixels:
        raise ImageTooLargeError(
            f"{name}: {width}x{height} pixels ({width * height / 1e6:.0f} megapixels) is more than the "
            f"{max_pixels / 1e6:.0f} megapixels this opens; downscale the image")


def open_image(source: Any, name: str, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Image.open with the pixel limit checked from the header, before anything is decoded."""
    try:
        img = Image.open(source)
    except Image.UnidentifiedImageError:
        if pillow_heif is None and Path(name).suffix.lower() in HEIF_EXTENSIONS:
            raise Image.UnidentifiedImageError(
                f"{name}: HEIC / HEIF photos are read with pillow-heif, which is not installed here: "
                "pip install -r requirements.txt") from None
        raise
    except Image.DecompressionBombError as err:  # PIL's own limit, met before ours: its text names the pixels
        found = re.search(r"\((\d+) pixels\)", str(err))
        size = f"{int(found.group(1)) / 1e6:.0f} megapixels" if found else "the image"
        raise ImageTooLargeError(f"{name}: {size} is more than the {max_pixels / 1e6:.0f} megapixels this opens; "
                                 "downscale the image") from None
    try:
        check_pixels(img.size, name, max_pixels)
    except ImageTooLargeError:
        img.close()
        raise
    return img


def _open_decoded(path: Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    with open_image(path, str(path), max_pixels) as img:
        img.load()  # decode every byte now: truncated files fail here, not mid-training
        oriented = ImageOps.exif_transpose(img)
        return oriented if oriented is not None else img.copy()


def load_rgb(path: Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Fully decode an image file and return it as RGB. Raises on unreadable files, and
    ImageTooLargeError above `max_pixels`."""
    return to_rgb(_open_decoded(Path(path), max_pixels))


def load_rgb_noting_transparency(path: Path, max_pixels: int = MAX_PIXELS) -> tuple[Image.Image, bool]:
    """`load_rgb`, and whether the file had transparent pixels (now white), from the one decoding."""
    img = _open_decoded(Path(path), max_pixels)
    return to_rgb(img), has_transparency(img)


def load_mask(path: Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """A mask as 8-bit greyscale: white = train on this pixel, black = ignore it; transparent =
    black (`to_mask`)."""
    return to_mask(_open_decoded(Path(path), max_pixels))


def load_alpha(path: Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """An image's alpha channel as its mask (Alpha as mask, kohya's alpha_mask): opaque = train,
    transparent = ignore; an image without one is all opaque."""
    img = _open_decoded(Path(path), max_pixels)
    alpha = _alpha_channel(img)
    return alpha if alpha is not None else Image.new("L", img.size, 255)


def load_depth(path: Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """A depth map as 32-bit float greyscale (PIL mode "F") in [0, 1] of its bit depth's range, so
    a 16-bit map keeps its steps; colour maps are read as their luminance."""
    img = _open_decoded(Path(path), max_pixels)
    if img.mode in _HIGH_BIT_MODES:
        arr = np.asarray(img, dtype=np.float64)
        return Image.fromarray((arr / _high_bit_top(img, arr)).astype(np.float32), "F")
    arr = np.asarray(to_rgb(img).convert("L"), dtype=np.float32) / 255.0
    return Image.fromarray(arr, "F")


def limit_page_images() -> None:
    """In the page's process every image PIL decodes (gradio's own decoding of what the browser
    sends included) is refused above PAGE_MAX_PIXELS, so one small file cannot take gigabytes."""
    Image.MAX_IMAGE_PIXELS = PAGE_MAX_PIXELS // 2  # PIL refuses above twice this, and warns above it
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
