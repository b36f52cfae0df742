"""A tiny offline dataset for the demo: coloured shapes on white, each with a caption file.

Six square images, two wide (96x64) and two tall (64x96), so aspect-ratio bucketing has work to
do in both directions, and every bucket divides evenly into batches of 2 (the demo preset's
batch size): at batch size 2 an epoch is 5 steps and no image is left out ("never trained").
Drawn with PIL only and deterministic; files that already exist are left alone, so calling this
again is cheap and never overwrites a user's edits.

Until image 09 became tall it was a wide purple triangle (3 wide, 1 tall: the tall image could
never fill a batch of 2). The tall image 09 has a new name, ``09-yellow-triangle``, so a demo
folder made before gains it on the next call instead of keeping the old wide image under the
same name. The old ``09-purple-triangle`` files are not deleted (a file in the user's folder is
never removed or changed here): such a folder has 3 wide images and 2 tall ones, still 5 steps an
epoch at batch size 2 with no image never trained (each epoch's shuffle leaves a different wide
image out). Delete the folder to get exactly the current set.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw

from ot_gradio.fsutil import atomic_write_bytes

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 70), "blue": (40, 80, 220), "yellow": (235, 200, 30), "purple": (140, 60, 180)}

# (shape, colour, width, height)
DEMO_IMAGES = (
    ("circle", "red", 64, 64),
    ("square", "blue", 64, 64),
    ("triangle", "green", 64, 64),
    ("circle", "yellow", 64, 64),
    ("square", "purple", 64, 64),
    ("triangle", "red", 64, 64),
    ("circle", "blue", 96, 64),
    ("square", "green", 96, 64),
    ("triangle", "yellow", 64, 96),  # a new name: before, 09 was a wide purple triangle (module docstring)
    ("circle", "green", 64, 96),
)


def _draw(shape: str, colour: str, width: int, height: int) -> Image.Image:
    img = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    side = min(width, height) * 0.7
    cx, cy = width / 2, height / 2
    box = (cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2)
    fill = COLOURS[colour]
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([(cx, box[1]), (box[2], box[3]), (box[0], box[3])], fill=fill)
    return img


def ensure_demo_dataset(folder: str | Path) -> Path:
    """Create the demo images and captions in ``folder`` if missing; return the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for number, (shape, colour, width, height) in enumerate(DEMO_IMAGES, start=1):
        stem = f"{number:02d}-{colour}-{shape}"
        image_path = folder / f"{stem}.png"
        caption_path = folder / f"{stem}.txt"
        if not image_path.exists():
            buffer = io.BytesIO()
            _draw(shape, colour, width, height).save(buffer, format="PNG")
            atomic_write_bytes(image_path, buffer.getvalue())
        if not caption_path.exists():
            atomic_write_bytes(caption_path, f"a {colour} {shape} on a white background\n".encode())
    return folder


DEMO_FOLDER_SUFFIX = ("demo-data", "shapes")


def is_demo_folder(path: str | Path) -> bool:
    """Whether `path` is a demo preset's concept folder (`.../demo-data/shapes`)."""
    return tuple(Path(path).parts[-2:]) == DEMO_FOLDER_SUFFIX


def ensure_demo_concepts(config) -> list[Path]:
    """Generate the demo dataset for every concept of `config` that points at a `demo-data/shapes`
    folder (the offline demo preset does), so the demo works on first use."""
    made = []
    for concept in getattr(config, "concepts", []) or []:
        if is_demo_folder(concept.path):
            made.append(ensure_demo_dataset(concept.path))
    return made
