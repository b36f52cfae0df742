"""The file names that are training images and clips: OneTrainer's own sets (its
modules/util/path_util.py), so a dataset folder made for OneTrainer trains with every file it
trained with there, an iPhone's HEIC / HEIF photos (read with pillow-heif) and GIFs, which
OneTrainer skips. A GIF is an image (its first frame) for an image model and a clip (read with
PyAV, each frame at its own time) for a video model. Case is ignored (`.JPG` is an image)."""

from __future__ import annotations

import re

HEIF_EXTENSIONS = (".heic", ".heif")
GIF_EXTENSIONS = (".gif",)  # an image, or a clip where the run reads clips
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".avif", *HEIF_EXTENSIONS, *GIF_EXTENSIONS)
# clips, for the video families (read with PyAV, whose FFmpeg opens all of these containers)
# An image's caption file: `<stem>.txt` (OneTrainer's), else `<stem>.caption`, the extension kohya's
# sd-scripts read by default, so a dataset captioned for kohya trains with its captions
CAPTION_EXTENSIONS = (".txt", ".caption")
VIDEO_EXTENSIONS = (".mp4", ".webm", ".mov", ".mkv", ".avi", ".m4v", ".mpeg", ".flv", ".wmv", *GIF_EXTENSIONS)
# Picture files that are not read (OneTrainer does not read them either): named in the dataset's
# warnings, so pictures that silently did not train are found
UNREAD_IMAGE_EXTENSIONS = (".jxl", ".jp2", ".tga", ".psd", ".exr", ".dng", ".cr2", ".cr3", ".nef",
                           ".arw", ".raf", ".orf", ".rw2", ".svg", ".ico")

# kohya's dataset folders are named `<repeats>_<name>` (`40_ohwx woman`): each image trains
# <repeats> times an epoch, and one without a caption file is captioned with <name>
_KOHYA_FOLDER = re.compile(r"^(\d+)_(.*\S.*)$")


def kohya_repeats(name: str) -> tuple[int, str] | None:
    """(repeats, name) of a folder named as kohya's dataset folders are, else None."""
    match = _KOHYA_FOLDER.match(name)
    return (int(match.group(1)), match.group(2).strip()) if match else None
