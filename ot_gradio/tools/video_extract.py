"""Tools → Video: training data from long videos, as OneTrainer's video tool makes it.

Two modes, for a video file or a folder of them (PyAV decodes; nothing else is needed):

- **clips**, for the video families: the video (or its `start`..`end`) is split at its cuts
  (`split_cuts`: a frame that differs from the one before far more than its neighbours do from
  theirs, on a 64x36 grey copy) and each scene into equal pieces of at most `max_seconds`; each
  piece becomes an .mp4 (`fps` > 0 resamples it to that rate by timestamp, 0 keeps the video's).
  Pieces shorter than half a second are left out (a flash between two cuts trains nothing).
- **images**, for the image families: about `per_second` frames a second, at jittered times so
  a scene's rhythm does not pick the same phase every time, as .jpg (quality 95); the blurriest
  `blur_drop` of them (variance of the Laplacian) are left out.

Both can cut away black borders (`remove_borders`: rows and columns that stay dark in every
sampled frame, letterboxes and pillarboxes) and vary the crop (`crop_variation`: each output is
cut to an aspect ratio up to that fraction away from the frame's, a random part of it, seeded).
A clip's display rotation (a phone's portrait video) is applied, as training reads it.

Output names are `<video stem>_<n>.mp4` / `.jpg` in the output folder (`subfolders`: in a folder
per video), n the next free number: nothing is ever overwritten, so a second run adds. Each file
is written under a temp name and renamed when whole. A file that cannot be read is named in the
result and the others go on. Torch-free.
"""

from __future__ import annotations

import io
import math
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..data.video import ClipError, error_reason, is_video_name, open_video, quarter_turns, upright, video_codec
from .jobs import Job, JobError

MODES = ("clips", "images")
MIN_CLIP_S = 0.5  # a shorter piece (between two cuts) is left out
CUT_MIN = 20.0  # a cut's mean grey difference (0..255) is at least this
CUT_RATIO = 3.0  # and this many times its neighbours' (scenedetect's AdaptiveDetector's rule, its default ratio)
DARK = 32  # a border row or column stays below this grey in every sampled frame
BORDER_EVERY_S = 1.0  # one frame a second is looked at for the borders
MAX_FRAMES = 1_000_000  # decoded per video at most (about 9 hours at 30 fps)
JPEG_QUALITY = 95


@dataclass(frozen=True)
class Options:
    mode: str = "clips"
    start: float | None = None  # seconds; None: the video's start
    end: float | None = None  # seconds; None: its end
    max_seconds: float = 5.0  # clips: the longest a clip is
    split_cuts: bool = True  # clips: split at cuts
    fps: float = 0.0  # clips: resample to this rate (0: the video's)
    per_second: float = 1.0  # images: frames taken a second
    blur_drop: float = 0.2  # images: the blurriest fraction left out
    remove_borders: bool = False
    crop_variation: float = 0.0  # 0..0.5: aspect ratio up to this fraction away from the frame's
    subfolders: bool = False  # a folder per video in the output
    seed: int = 42


def parse_time(text: Any, field: str) -> float | None:
    """Seconds from '1:02:03.5', '2:03' or '123.5' (empty: None)."""
    value = str(text or "").strip()
    if not value:
        return None
    if not re.fullmatch(r"\d+(?:\.\d+)?|\d+:\d{1,2}(?:\.\d+)?|\d+:\d{1,2}:\d{1,2}(?:\.\d+)?", value):
        raise JobError(f"{field}: '{value}' is no time; write seconds (90), minutes:seconds (1:30) or hours:minutes:seconds (0:01:30)")
    seconds = 0.0
    for part in value.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def options_from(params: dict[str, Any]) -> Options:
    mode = str(params.get("mode") or "clips")
    if mode not in MODES:
        raise JobError(f"mode: '{mode}' is not one of {', '.join(MODES)}")

    def number(key: str, default: float, low: float, high: float, label: str) -> float:
        try:
            value = float(params.get(key, default) if params.get(key) not in (None, "") else default)
        except (TypeError, ValueError):
            raise JobError(f"{label}: '{params.get(key)}' is not a number") from None
        if not (low <= value <= high) or math.isnan(value):
            raise JobError(f"{label}: {value:g} is out of range; give {low:g} to {high:g}")
        return value

    start, end = parse_time(params.get("start"), "From"), parse_time(params.get("end"), "To")
    if start is not None and end is not None and end <= start:
        raise JobError(f"To: {end:g} s is not after From ({start:g} s)")
    return Options(mode, start, end, number("max_seconds", 5.0, 0.5, 600.0, "Max clip length (s)"), bool(params.get("split_cuts", True)),
                   number("fps", 0.0, 0.0, 240.0, "Frame rate"), number("per_second", 1.0, 0.01, 60.0, "Images per second"),
                   number("blur_drop", 0.2, 0.0, 0.95, "Blurriest left out"), bool(params.get("remove_borders", False)),
                   number("crop_variation", 0.0, 0.0, 0.5, "Crop variation"), bool(params.get("subfolders", False)),
                   int(number("seed", 42, 0, 2**31 - 1, "Seed")))


def list_videos(source: Path, recursive: bool) -> list[Path]:
    if source.is_file():
        return [source]
    found = []
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if recursive else []
        found += [Path(root) / name for name in files if not name.startswith(".") and is_video_name(name)]
    return sorted(found)


def run_job(params: dict[str, Any], job: Job) -> dict[str, Any]:
    options = options_from(params)
    source = Path(str(params.get("source") or "")).expanduser()
    if not str(params.get("source") or "").strip() or not source.exists():
        raise JobError(f"Video: '{params.get('source') or ''}' does not exist; give a video file or a folder of videos")
    if source.is_file() and not is_video_name(source.name):
        raise JobError(f"Video: {source.name} is not a video file (.mp4, .webm, .mov, .mkv, ...)")
    output = Path(str(params.get("output") or "")).expanduser()
    if not str(params.get("output") or "").strip():
        raise JobError("Output folder: empty; give the folder the clips or images go to (a concept's folder)")
    videos = list_videos(source, bool(params.get("recursive", False)))
    if not videos:
        raise JobError(f"Video: no video files in {source}")
    rng = random.Random(options.seed)
    result: dict[str, Any] = {"mode": options.mode, "videos": len(videos), "written": 0, "cuts": 0, "left_out_short": 0,
                              "left_out_blurry": 0, "failed": [], "output": str(output), "files": []}
    inside = [v for v in videos if v.resolve().parent == output.resolve()]
    if inside:  # a concept folder that holds the long video too: a video model would train on it as well
        result["inside_output"] = [str(v) for v in inside]
    for index, video in enumerate(videos):
        job.progress(index, len(videos), video.name)
        folder = output / _safe_stem(video) if options.subfolders else output
        try:
            folder.mkdir(parents=True, exist_ok=True)
            done = (extract_clips if options.mode == "clips" else extract_images)(video, folder, options, rng, job)
        except ClipError as err:
            result["failed"].append({"file": str(video), "reason": str(err)})
            job.log(f"{video}: {err}")
            continue
        for key in ("written", "cuts", "left_out_short", "left_out_blurry"):
            result[key] += done.get(key, 0)
        result["files"] += done["files"]
        if job.cancelled():
            result["cancelled"] = True
            break
    job.progress(len(videos), len(videos), "done")
    result["files"] = result["files"][:200]
    return result


def _safe_stem(video: Path) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^\w.\-]", "_", video.stem)).strip("._") or "video"


def _place(tmp: Path, folder: Path, stem: str, suffix: str, start: int) -> tuple[Path, int]:
    """`tmp` (whole) renamed to `<stem>_<n>` + suffix, n the first free number from `start`; a name
    taken meanwhile (another job writing there) is never replaced: a hard link fails on it. Returns
    the file and the number to try next."""
    n = start
    while True:
        target = folder / f"{stem}_{n:04d}{suffix}"
        n += 1
        if target.exists():
            continue
        try:
            os.link(tmp, target)
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links (some network or FUSE mounts)
            if target.exists():
                continue
            os.replace(tmp, target)
            return target, n
        tmp.unlink()
        return target, n


# --- reading --------------------------------------------------------------------------------

def _frames(video: Path, options: Options):
    """(index, seconds, PyAV frame) of the frames in the options' time range, upright later."""
    container = open_video(video)
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        if options.start:
            try:
                container.seek(int(options.start / float(stream.time_base)), stream=stream, backward=True, any_frame=False)
            except Exception:  # noqa: BLE001 (a container without an index: decoded from the start instead)
                container.seek(0)
        rate = float(stream.average_rate or stream.guessed_rate or 25)
        index, last = 0, -1.0
        for count, frame in enumerate(container.decode(stream)):
            if count >= MAX_FRAMES:
                break
            t = float(frame.time) if frame.time is not None else (last + 1 / rate if last >= 0 else 0.0)
            last = t
            if options.start is not None and t < options.start - 1e-6:
                continue
            if options.end is not None and t >= options.end:
                break
            yield index, t, frame
            index += 1
    except ClipError:
        raise
    except Exception as exc:  # noqa: BLE001 (a damaged stream: what was read stays written)
        raise ClipError(f"could not be decoded: {error_reason(exc)}") from None
    finally:
        container.close()


@dataclass
class Survey:
    times: list[float]
    scores: list[float]  # mean grey difference to the frame before (0 for the first)
    box: tuple[int, int, int, int] | None  # left, top, right, bottom without the black borders (upright)
    size: tuple[int, int]  # the upright frame's width, height


def survey(video: Path, options: Options, want_scores: bool, want_box: bool) -> Survey:
    """One pass over the range: every frame's time, the cut scores, the border box."""
    times, scores, previous = [], [], None
    rows = cols = None
    size = (0, 0)
    sample_at, every = 0.0, BORDER_EVERY_S
    for index, t, frame in _frames(video, options):
        turns = quarter_turns(frame)
        times.append(t)
        if want_scores:
            small = np.rot90(frame.reformat(width=64, height=36, format="gray").to_ndarray().astype(np.float32), turns)
            scores.append(float(np.abs(small - previous).mean()) if previous is not None and previous.shape == small.shape else 0.0)
            previous = small
        if want_box and (index == 0 or t >= sample_at):  # the borders: a frame a second, full size
            sample_at = t + every
            grey = np.rot90(frame.to_ndarray(format="gray"), turns)
            rows = grey.max(axis=1) if rows is None or rows.shape[0] != grey.shape[0] else np.maximum(rows, grey.max(axis=1))
            cols = grey.max(axis=0) if cols is None or cols.shape[0] != grey.shape[1] else np.maximum(cols, grey.max(axis=0))
        if index == 0:
            w, h = frame.width, frame.height
            size = (h, w) if turns % 2 else (w, h)
    if not times:
        raise ClipError("has no frame in the time range" if options.start or options.end else "decodes to no frame")
    box = None
    if want_box and rows is not None and cols is not None:
        lit_rows, lit_cols = np.flatnonzero(rows >= DARK), np.flatnonzero(cols >= DARK)
        if lit_rows.size and lit_cols.size:
            box = (int(lit_cols[0]), int(lit_rows[0]), int(lit_cols[-1]) + 1, int(lit_rows[-1]) + 1)
    return Survey(times, scores, box, size)


def cut_points(scores: list[float]) -> list[int]:
    """Frame indices that start a new scene: a difference of at least CUT_MIN that is CUT_RATIO
    times the mean of the two before and the two after it."""
    cuts = []
    for i in range(1, len(scores)):
        around = [scores[j] for j in (i - 2, i - 1, i + 1, i + 2) if 1 <= j < len(scores)]
        if scores[i] >= CUT_MIN and scores[i] >= CUT_RATIO * max(sum(around) / len(around) if around else 0.0, 1.0):
            cuts.append(i)
    return cuts


def pieces(times: list[float], cuts: list[int], max_seconds: float) -> tuple[list[tuple[int, int]], int]:
    """Frame ranges [a, b) of the clips: scenes split into equal pieces of at most max_seconds;
    and how many pieces were too short to keep."""
    step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1 / 25
    bounds = [0, *cuts, len(times)]
    kept, short = [], 0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        length = times[b - 1] - times[a] + step
        n = max(1, math.ceil(length / max_seconds - 1e-9))
        edges = [a + round((b - a) * k / n) for k in range(n + 1)]
        for x, y in zip(edges[:-1], edges[1:], strict=True):
            if y - x < 2 or times[y - 1] - times[x] + step < MIN_CLIP_S - 1e-9:
                short += 1
            else:
                kept.append((x, y))
    return kept, short


def crop_box(size: tuple[int, int], box: tuple[int, int, int, int] | None, variation: float, rng: random.Random
             ) -> tuple[int, int, int, int]:
    """The part of an upright frame an output keeps: the border box, cut to an aspect ratio up to
    `variation` away from its own (a random part of it), with even sides (yuv420p needs them)."""
    left, top, right, bottom = box or (0, 0, *size)
    width, height = right - left, bottom - top
    if variation > 0:
        factor = 1 + rng.uniform(-variation, variation)
        if factor < 1:  # narrower: fewer columns
            new_width = max(2, round(width * factor))
            left += rng.randint(0, width - new_width)
            width = new_width
        else:  # wider: fewer rows
            new_height = max(2, round(height / factor))
            top += rng.randint(0, height - new_height)
            height = new_height
    width, height = max(2, width - width % 2), max(2, height - height % 2)
    return left, top, left + width, top + height


def _image(frame, turns: int, box: tuple[int, int, int, int]) -> Image.Image:
    return upright(frame.to_image(), turns).crop(box)


# --- clips ----------------------------------------------------------------------------------

def extract_clips(video: Path, folder: Path, options: Options, rng: random.Random, job: Job) -> dict[str, Any]:
    import av  # noqa: PLC0415

    found = survey(video, options, options.split_cuts, options.remove_borders)
    cuts = cut_points(found.scores) if options.split_cuts else []
    ranges, short = pieces(found.times, cuts, options.max_seconds)
    times = found.times
    source_rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 25.0
    rate = options.fps or source_rate
    # for each clip, how many times each of its frames is written (resampling by timestamp)
    plans = []
    for a, b in ranges:
        if options.fps:
            counts = [0] * (b - a)
            t, end = times[a], times[b - 1] + 1 / source_rate
            i = a
            while t < end - 1e-9:
                while i + 1 < b and times[i + 1] <= t + 1e-6:
                    i += 1
                counts[i - a] += 1
                t += 1 / options.fps
        else:
            counts = [1] * (b - a)
        plans.append((a, b, counts, crop_box(found.size, found.box, options.crop_variation, rng)))
    files, number, current = [], 1, 0
    out = stream = None
    tmp = None
    try:
        for index, _, frame in _frames(video, options):
            while current < len(plans) and index >= plans[current][1]:
                current += 1
            if current >= len(plans):
                break
            a, b, counts, box = plans[current]
            if index < a:
                continue
            if index == a:
                job.check()
                job.progress(0, 0, f"{video.name}: clip {current + 1} of {len(plans)}")
                tmp = folder / f".{_safe_stem(video)}.{os.getpid()}.{index}.tmp.mp4"
                out = av.open(str(tmp), "w", format="mp4")
                stream = out.add_stream(video_codec(), rate=Fraction(rate).limit_denominator(1000))
                stream.width, stream.height, stream.pix_fmt = box[2] - box[0], box[3] - box[1], "yuv420p"
            image = _image(frame, quarter_turns(frame), box)
            for _ in range(counts[index - a]):
                for packet in stream.encode(av.VideoFrame.from_image(image)):
                    out.mux(packet)
            if index == b - 1:
                for packet in stream.encode():
                    out.mux(packet)
                out.close()
                out = None
                target, number = _place(tmp, folder, _safe_stem(video), ".mp4", number)
                files.append(str(target))
                tmp = None
    finally:
        if out is not None:
            out.close()
        if tmp is not None and tmp.exists():
            tmp.unlink()  # a clip cut off by Cancel or an error is not left behind
    return {"written": len(files), "cuts": len(cuts), "left_out_short": short, "files": files}


# --- images ---------------------------------------------------------------------------------

def sharpness(image: Image.Image) -> float:
    """Variance of the Laplacian of the grey image: low for a blurred frame."""
    grey = np.asarray(image.convert("L"), dtype=np.float32)
    if grey.shape[0] < 3 or grey.shape[1] < 3:
        return 0.0
    lap = 4 * grey[1:-1, 1:-1] - grey[:-2, 1:-1] - grey[2:, 1:-1] - grey[1:-1, :-2] - grey[1:-1, 2:]
    return float(lap.var())


def extract_images(video: Path, folder: Path, options: Options, rng: random.Random, job: Job) -> dict[str, Any]:
    """Frames into a hidden temp folder first (a long video's frames do not wait in RAM), then the
    kept ones moved into place under free names; the temp folder is removed whatever happens."""
    found = survey(video, options, False, True) if options.remove_borders else None
    taken: list[tuple[float, Path]] = []  # (sharpness, its temp file), in time order
    origin = next_time = None
    k = 0

    def target(k: int) -> float:  # the k-th time a frame is taken: k + 0.5 periods in, jittered
        return origin + (k + 0.5 + rng.uniform(-0.3, 0.3)) / options.per_second

    staging = Path(tempfile.mkdtemp(prefix=f".{_safe_stem(video)}.", dir=folder))
    try:
        for index, t, frame in _frames(video, options):
            turns = quarter_turns(frame)
            if origin is None:
                origin = t
                next_time = target(0)
                size = (frame.height, frame.width) if turns % 2 else (frame.width, frame.height)
            if index % 25 == 0:
                job.check()
            if t + 1e-6 < next_time:
                continue
            image = _image(frame, turns, crop_box(size, found.box if found else None, options.crop_variation, rng))
            data = io.BytesIO()
            image.save(data, format="JPEG", quality=JPEG_QUALITY)
            path = staging / f"{len(taken):07d}.jpg"
            path.write_bytes(data.getvalue())
            taken.append((sharpness(image), path))
            while next_time <= t + 1e-6:  # a frame is taken once, whatever times it covers
                k += 1
                next_time = target(k)
        if not taken:
            raise ClipError("has no frame in the time range" if options.start or options.end else "decodes to no frame")
        drop = int(len(taken) * options.blur_drop)
        left_out = set(sorted(range(len(taken)), key=lambda i: taken[i][0])[:drop])
        files, number = [], 1
        for i, (_, path) in enumerate(taken):
            if i not in left_out:
                placed, number = _place(path, folder, _safe_stem(video), ".jpg", number)
                files.append(str(placed))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"written": len(files), "left_out_blurry": drop, "files": files}
