"""The file names that are training images and clips: OneTrainer's own sets (its
modules/util/path_util.py), so a dataset folder made for OneTrainer trains with every file it
trained with there. Case is ignored (`.JPG` is an image)."""

from __future__ import annotations

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".avif")
# clips, for the video families (read with PyAV, whose FFmpeg opens all of these containers)
VIDEO_EXTENSIONS = (".mp4", ".webm", ".mov", ".mkv", ".avi", ".m4v", ".mpeg", ".flv", ".wmv")
