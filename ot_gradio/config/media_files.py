"""The file names that are training images and clips: OneTrainer's own sets (its
modules/util/path_util.py), so a dataset folder made for OneTrainer trains with every file it
trained with there, and an iPhone's HEIC / HEIF photos, which OneTrainer skips (read with
pillow-heif). Case is ignored (`.JPG` is an image)."""

from __future__ import annotations

HEIF_EXTENSIONS = (".heic", ".heif")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".avif", *HEIF_EXTENSIONS)
# clips, for the video families (read with PyAV, whose FFmpeg opens all of these containers)
VIDEO_EXTENSIONS = (".mp4", ".webm", ".mov", ".mkv", ".avi", ".m4v", ".mpeg", ".flv", ".wmv")
# Picture files that are not read (OneTrainer does not read them either): named in the dataset's
# warnings, so pictures that silently did not train are found
UNREAD_IMAGE_EXTENSIONS = (".gif", ".jxl", ".jp2", ".tga", ".psd", ".exr", ".dng", ".cr2", ".cr3", ".nef",
                           ".arw", ".raf", ".orf", ".rw2", ".svg", ".ico")
