"""Short clips for the tests, written with PyAV in a test's folder (no clip files in the repo),
and the hostile ones the dataset must name and skip."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_clip(path: Path, frames: int = 9, fps: int = 24, size: tuple[int, int] = (32, 32), codec: str = "mpeg4",
               seed: int = 0, rotation: int = 0, audio_seconds: float = 0.0) -> Path:
    """A clip of `frames` frames of `size` (width, height): a bright square moving across noise.
    `rotation`: a display matrix turning it that many degrees counter-clockwise (a phone's
    portrait clip: -90); `audio_seconds`: a silent AAC track that long."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    width, height = size
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 80, (height, width, 3), dtype=np.uint8)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if rotation:
            stream.set_display_rotation(rotation)
        audio = out.add_stream("aac", rate=48000) if audio_seconds else None
        for i in range(frames):
            arr = base.copy()
            x = (i * 3) % max(1, width - 8)
            arr[height // 4: height // 4 + 8, x: x + 8] = (240, 200, 40)
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
        if audio_seconds:
            for start in range(0, int(audio_seconds * 48000), 1024):
                sound = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
                sound.sample_rate, sound.pts = 48000, start
                for packet in audio.encode(sound):
                    out.mux(packet)
            for packet in audio.encode():
                out.mux(packet)
    return path


def write_hostile_clips(folder: Path) -> dict[str, Path]:
    """name -> path of clips that cannot be trained on: truncated, not a video at all (wrong
    codec / garbage), and a container with no frame."""
    import av

    folder.mkdir(parents=True, exist_ok=True)
    whole = write_clip(folder / "whole.tmp.mp4", frames=9)
    truncated = folder / "truncated.mp4"
    truncated.write_bytes(whole.read_bytes()[: 600])
    whole.unlink()
    garbage = folder / "garbage.webm"
    garbage.write_bytes(b"\x1a\x45\xdf\xa3 this is not a webm" * 20)
    empty = folder / "empty.mov"
    with av.open(str(empty), "w") as out:
        stream = out.add_stream("mpeg4", rate=24)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        out.start_encoding()
    return {"truncated": truncated, "garbage": garbage, "empty": empty}


def write_clips_and_an_image(folder: Path, prompt: str) -> Path:
    """Three 9-frame clips captioned `prompt` and one yellow image, the video families' e2e data."""
    from PIL import Image

    for i in range(3):
        write_clip(folder / f"clip{i}.mp4", frames=9, seed=i)
        (folder / f"clip{i}.txt").write_text(prompt)
    Image.new("RGB", (32, 32), (240, 200, 40)).save(folder / "still.png")
    (folder / "still.txt").write_text("a yellow square")
    return folder
