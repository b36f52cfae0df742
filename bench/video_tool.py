"""Tools → Video on a full-HD-ish clip: how long clips and images take, and what they find.

    .venv/bin/python bench/video_tool.py [--seconds 10] [--size 1280x720] [--fps 30]

Makes a video of `--seconds` at `--size` and `--fps` with three scenes (two hard cuts, each scene
a moving pattern) inside 80 px black bars (PyAV, the encoder the trainer's samples use), then runs
the "video" job as the page does (`run_inline`) with the tool's defaults (clips: at most 5 s, split
at cuts; images: one a second, the blurriest fifth left out), then each again with *Remove black
borders* on (off by default; it adds a pass over the video). Prints seconds per run, per second of
video, and what came out (cuts found: 2 expected).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ot_gradio.data.video import video_codec  # noqa: E402
from ot_gradio.tools.jobs import run_inline  # noqa: E402


def make_video(path: Path, seconds: float, width: int, height: int, fps: int) -> Path:
    import av

    frames = int(seconds * fps)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream(video_codec(), rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            scene = 3 * i // frames
            if scene == 0:
                image = np.stack([128 + 100 * np.sin((x - 3 * i) / 40), 128 + 100 * np.cos(y / 30), 60 + 0 * x], -1)
            elif scene == 1:
                image = np.stack([60 + 0 * x, 128 + 100 * np.sin((x + y + 4 * i) / 25), 200 + 0 * x], -1)
            else:
                image = np.stack([200 + 50 * np.sin(y / 15 + i / 5), 80 + 0 * x, 128 + 100 * np.cos((x - 2 * i) / 50)], -1)
            image[:80] = 0
            image[-80:] = 0
            for packet in stream.encode(av.VideoFrame.from_ndarray(image.clip(0, 255).astype(np.uint8), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", default="1280x720")
    parser.add_argument("--fps", type=int, default=30)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        video = make_video(work / "film.mp4", args.seconds, width, height, args.fps)
        print(f"made {args.seconds:g} s at {width}x{height}, {args.fps} fps in {time.perf_counter() - t0:.1f} s")
        ok = True
        for mode, extra in (("clips", {}), ("images", {}), ("clips", {"remove_borders": True}), ("images", {"remove_borders": True})):
            out = work / mode
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            result = run_inline("video", {"source": str(video), "output": str(out), "mode": mode, **extra})
            took = time.perf_counter() - t0
            found = {k: result[k] for k in ("written", "cuts", "left_out_short", "left_out_blurry")}
            print(f"{mode}{' + remove borders' if extra else ' (defaults)'}: {took:.2f} s ({took / args.seconds:.3f} s per second of video) {found}")
            ok = ok and not result["failed"] and (mode != "clips" or result["cuts"] == 2)
        print(f"RESULT video tool: cuts found and every file written: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
