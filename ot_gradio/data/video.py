"""Training clips: which files are clips, and reading the frames a video family trains on (PyAV).

Frame sampling, the same for every clip of a run (`FrameSampling`): from `start` seconds on,
frames are taken at no more than `fps` per second (a faster clip drops frames by timestamp, a
slower one keeps all its frames: nothing is repeated), up to `frames`; the count is then cut to
the form step*k + 1 the family's VAE needs (4k+1 for Wan). A clip shorter than that trains with
the frames it has (cut to the form), and is named in the dataset report. A concept's *Spread
frames over the clip* takes them spread evenly over the whole clip from `start` on instead, by
their place among its frames as ai-toolkit picks them (`FrameSampling.spread`, `spread_picks`;
every frame of a clip decodes then, up to MAX_SPREAD_FRAMES).

A clip with a display rotation (a phone's portrait clip, stored landscape) is turned upright, as
players show it and as images' EXIF orientation is applied.

Hostile files never reach a step: a clip that cannot be opened, has no video stream, decodes to
no frame, or is larger per frame than an image may be raises ClipError with the reason. Reading
stops at the last frame needed, and at most `MAX_DECODED_FRAMES` frames are decoded per clip
(a clip whose timestamps never advance cannot make it decode forever), so a 10,000-frame clip
costs the frames it trains with, not its length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from PIL import Image

from ..config.media_files import VIDEO_EXTENSIONS
from .images import MAX_PIXELS

MAX_DECODED_FRAMES = 2048
MAX_SPREAD_FRAMES = 36_000  # frames a clip's spread is taken over (25 minutes at 24 fps)
_EPS = 1e-4


class ClipError(ValueError):
    """A clip that cannot be trained on; the message says why."""


def is_video_name(name: str) -> bool:
    return Path(name).suffix.lower() in VIDEO_EXTENSIONS


@dataclass(frozen=True)
class FrameSampling:
    """How the frames of a clip are picked (the latent cache keys on all of it)."""

    frames: int = 25  # the most frames a clip trains with
    step: int = 4  # frame counts are step * k + 1 (the family's temporal VAE factor)
    fps: float = 24.0  # the most frames per second taken from a clip
    start: float = 0.0  # seconds skipped at the start of each clip
    # each variation of a longer clip trains a window starting at a random time after `start` (OneTrainer's
    # way); False: always the first frames after `start`. Not in `key()`: a moved window keys on its offset.
    random_window: bool = False
    # the frames spread evenly over the clip from `start` to its last frame, by index as ai-toolkit's
    # shrink_video_to_frames picks them (frame round(i * (n - 1) / (k - 1)) of n); `fps` unused then
    spread: bool = False

    def __post_init__(self) -> None:
        if self.frames < 1 or self.step < 1 or self.fps <= 0 or self.start < 0:
            raise ValueError(f"frame sampling needs frames >= 1, fps > 0 and start >= 0, not {self}")

    def count(self, available: int) -> int:
        """Frames a clip with `available` sampled frames trains with (0: too few for any)."""
        usable = min(int(available), int(self.frames))
        return 0 if usable < 1 else (usable - 1) // self.step * self.step + 1

    def key(self) -> dict:
        # "picking" 2: frames up to one container tick early are taken (1 lost every third frame of
        # a 24 fps WebM / MKV clip) and turned upright by the clip's display matrix, so latents
        # cached from the earlier frames are made again
        key = {"frames": int(self.frames), "step": int(self.step), "fps": float(self.fps), "start": float(self.start), "picking": 2}
        return {**key, "fps": 0.0, "spread": True} if self.spread else key


def run_sampling(config: object, frame_step: int | None) -> FrameSampling | None:
    """The run's frame sampling (`frames`, `frame_rate`, `clip_start`) for a video family
    (`frame_step`: the model's; None: an image family, which reads no clips)."""
    if frame_step is None:
        return None
    return FrameSampling(int(str(getattr(config, "frames", 25)).strip()), int(frame_step), float(getattr(config, "frame_rate", 24.0)),
                         float(getattr(config, "clip_start", 0.0)), bool(getattr(config, "random_clip_window", False)))


@dataclass(frozen=True)
class ClipInfo:
    width: int
    height: int
    frames: int  # frames it trains with (of the form step * k + 1)
    available: int  # frames sampling found (at most `FrameSampling.frames`)
    duration: float  # seconds, from the container (0 when unknown)
    slack: float = 0.0  # seconds the window of `frames` frames can move later and still fit in the clip


def open_video(path: Path):
    import av  # noqa: PLC0415 (loaded only where clips are read)

    try:
        container = av.open(str(path))
    except Exception as exc:  # noqa: BLE001 (every PyAV error means the same: not readable)
        raise ClipError(f"cannot be opened as a video: {error_reason(exc)}") from None
    if not container.streams.video:
        container.close()
        raise ClipError("has no video stream (no frames)")
    return container


def error_reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def quarter_turns(frame) -> int:
    """Counter-clockwise quarter turns that show a frame upright: a phone's portrait clip is stored
    landscape with a display matrix (rotation -90) that players apply, as images' EXIF orientation."""
    try:
        degrees = float(frame.rotation or 0)
    except Exception:  # noqa: BLE001 (a malformed display matrix: shown as stored)
        return 0
    return round(degrees / 90) % 4


def upright(image: Image.Image, turns: int) -> Image.Image:
    if not turns:
        return image
    return image.transpose((Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_180, Image.Transpose.ROTATE_270)[turns - 1])


def _clock(container, stream) -> tuple[float, float, float, bool]:
    """The clip's frame rate (24 when it says none), duration in seconds (0 when unknown), the
    time of its first frame, as its container states them, and whether the video stream states its
    own duration (WebM and MKV do not: the container's is the longest track's, audio's too)."""
    rate = float(stream.average_rate or stream.guessed_rate or 0) or 24.0
    duration = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else 0.0
    own = bool(duration)
    if not duration and container.duration:
        duration = container.duration / 1_000_000
    origin = float(stream.start_time * stream.time_base) if stream.start_time is not None and stream.time_base else 0.0
    return rate, duration, origin, own


def _video_end(path: Path) -> float:
    """When the clip's last video frame ends, in seconds on its frames' clock, from its last video
    packets (demuxed, not decoded, from the keyframe before the container's end; 0 when none says)."""
    container = open_video(path)
    end = 0.0
    try:
        stream = container.streams.video[0]
        base = float(stream.time_base) if stream.time_base else 0.0
        if not base:
            return 0.0
        if container.duration:  # to the video's last keyframe (a longer audio track ends later: seeking stops at the video's)
            container.seek(int(container.duration / 1_000_000 / base), stream=stream, backward=True)
        for count, packet in enumerate(container.demux(stream)):
            if packet.pts is not None:
                end = max(end, (packet.pts + (packet.duration or 0)) * base)
            if count >= MAX_DECODED_FRAMES * 8:  # (one group of pictures; a file that cannot seek: its first ones)
                break
    except Exception:  # noqa: BLE001, S110 (a damaged file: the packets demuxed before it)
        pass
    finally:
        container.close()
    return end


def _frames_after(path: Path, start: float, early: float) -> int:
    """How many frames the clip has from `start` seconds on, from its packets (demuxed, not
    decoded); at most MAX_SPREAD_FRAMES."""
    container = open_video(path)
    count = 0
    try:
        stream = container.streams.video[0]
        base = float(stream.time_base) if stream.time_base else 0.0
        for packet in container.demux(stream):
            if packet.size == 0:  # the demuxer's flush packet
                continue
            stamp = packet.pts if packet.pts is not None else packet.dts
            if start > 0 and stamp is not None and base and stamp * base < start - early:  # (as the decoding skips them)
                continue
            count += 1
            if count >= MAX_SPREAD_FRAMES:
                break
    except Exception as exc:  # noqa: BLE001 (a damaged file: the frames demuxed before it)
        if not count:
            raise ClipError(f"cannot be read: {error_reason(exc)}") from None
    finally:
        container.close()
    return count


def spread_picks(available: int, frames: int) -> list[int]:
    """ai-toolkit's frames of a clip of `available` frames spread to `frames`: round(i * (n - 1) /
    (k - 1)), its first and last frame included; every frame of a clip that has no more."""
    if available <= frames:
        return list(range(available))
    return [round(i * (available - 1) / (frames - 1)) for i in range(frames)] if frames > 1 else [0]


def _sampled(path: Path, sampling: FrameSampling, limit: int, keep: bool
             ) -> tuple[list[Image.Image], int, int, int, float, list[float], float]:
    """(the frames as RGB images when `keep`, how many were taken, width, height, duration, the
    taken frames' times in seconds as the container stamps them, the clip's end time)."""
    from .images import to_rgb  # noqa: PLC0415

    container = open_video(path)
    taken: list[Image.Image] = []
    times: list[float] = []
    count = width = height = decoded = 0
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        rate, duration, origin, own = _clock(container, stream)
        period = 1.0 / sampling.fps
        # Containers round timestamps to their tick (WebM, MKV, FLV, WMV: 1 ms, so frame 2 of a 24 fps
        # clip is at 0.083 s, before the grid's 0.0833 s): a frame up to one tick early is on time.
        tick = float(stream.time_base) if stream.time_base else 0.0
        early = max(_EPS, min(tick, period / 8))
        target = sampling.start
        picks: set[int] = set()
        if sampling.spread:  # the frames that train, by their place among the clip's frames from `start` on
            available = _frames_after(path, sampling.start, early)
            picks = set(spread_picks(available, sampling.count(min(available, limit))))
        wanted = len(picks) if sampling.spread else limit
        ordinal = -1
        if sampling.start > 0 and stream.time_base:  # to the keyframe before the start: no decoding from 0
            try:
                container.seek(int(sampling.start / stream.time_base), stream=stream, backward=True)
            except Exception:  # noqa: BLE001, S110 (a clip that cannot seek is read from where it is)
                pass
        try:
            for frame in container.decode(stream):
                decoded += 1
                if decoded > (MAX_SPREAD_FRAMES + MAX_DECODED_FRAMES if sampling.spread else MAX_DECODED_FRAMES):
                    break
                time = float(frame.pts * frame.time_base) if frame.pts is not None and frame.time_base else (decoded - 1) / rate
                if time < target - early:
                    continue
                ordinal += 1
                if sampling.spread and ordinal not in picks:
                    continue
                if frame.width * frame.height > MAX_PIXELS // 2:
                    raise ClipError(f"is {frame.width}x{frame.height} per frame, more than the "
                                    f"{MAX_PIXELS // 2 / 1e6:.0f} megapixels a frame may have; downscale the clip")
                turn = quarter_turns(frame)
                width, height = (frame.height, frame.width) if turn % 2 else (frame.width, frame.height)
                if keep:
                    taken.append(upright(to_rgb(frame.to_image()), turn))  # a GIF's transparency: on white, as images
                times.append(time)
                count += 1
                if count >= wanted:
                    break
                if not sampling.spread:  # the next grid time after this frame: faster clips drop frames, slower ones keep all
                    steps = int((time - sampling.start + early) / period) + 1
                    target = sampling.start + steps * period
        except ClipError:
            raise
        except Exception as exc:  # noqa: BLE001 (a decoding error mid-file: keep what decoded before it)
            if not count:
                raise ClipError(f"cannot be decoded: {error_reason(exc)}") from None
    finally:
        container.close()
    if not count:
        after = f" after {sampling.start:g} s" if sampling.start else ""
        raise ClipError(f"has no frame to train on{after} (zero frames, or too short)")
    return taken, count, width, height, duration, times, origin + duration if own else -1.0


def probe_clip(path: str | Path, sampling: FrameSampling) -> ClipInfo:
    """What a clip trains with; decodes the frames it would use (at most `sampling.frames`), so a
    clip that fails here is skipped before training instead of failing a step."""
    _, count, width, height, duration, times, end = _sampled(Path(path), sampling, sampling.frames, keep=False)
    frames = sampling.count(count)
    slack = 0.0
    if not sampling.spread:  # (spread: the whole clip)
        if end < 0:  # the video's own end (a longer audio track must not move the window past it)
            end = _video_end(Path(path))
        slack = _slack(times[:frames], end if duration > 0 else 0.0, sampling)
    return ClipInfo(width, height, frames, count, duration, slack)


def _slack(times: list[float], end: float, sampling: FrameSampling) -> float:
    """How much later a window with frames at `times` could start and still end one frame interval
    before the clip's stated `end`, on the same clock as the times (0: unknown length, or nothing to spare)."""
    if not times or end <= 0:
        return 0.0
    interval = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0 / sampling.fps
    return max(0.0, math.floor(round(end - interval - times[-1], 9) * 1000) / 1000)  # (to the ms below: the last frame stays in)


def read_clip(path: str | Path, sampling: FrameSampling, frames: int) -> list[Image.Image]:
    """The first `frames` sampled frames of a clip as RGB images; a ClipError when fewer decode."""
    images, count, *_ = _sampled(Path(path), sampling, frames, keep=True)
    if count < frames:
        raise ClipError(f"gave {count} frames, fewer than the {frames} it was scanned with; was the file changed?")
    return images



def middle_frame(path: str | Path) -> Image.Image:
    """The frame halfway through a clip (what a captioner looks at: a first frame is often a fade
    in); the first frame when the clip's length is unknown. A ClipError when none decodes."""
    one = FrameSampling(frames=1, step=1)
    duration = probe_clip(path, one).duration
    if duration > 0:
        try:
            return read_clip(path, FrameSampling(frames=1, step=1, start=duration / 2), 1)[0]
        except ClipError:
            pass  # a container whose stated length is longer than its frames
    return read_clip(path, one, 1)[0]


def still_image(path: str | Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """An image as RGB, or a clip's first frame (what a clip's mask is painted on: the mask holds
    for each of its frames); ImageTooLargeError above `max_pixels`, ClipError for an unreadable clip."""
    from .images import check_pixels, load_rgb  # noqa: PLC0415

    if not is_video_name(Path(path).name):
        return load_rgb(Path(path), max_pixels)
    frame = read_clip(path, FrameSampling(frames=1, step=1), 1)[0]
    check_pixels(frame.size, str(path), max_pixels)
    return frame


def video_codec() -> str:
    """h264 (libx264, what browsers play in an .mp4) where the PyAV wheel has it, else mpeg4."""
    import av  # noqa: PLC0415

    try:
        av.codec.Codec("libx264", "w")
    except Exception:  # noqa: BLE001 (a wheel without the encoder)
        return "mpeg4"
    return "libx264"


def write_video(frames: list[Image.Image], path: str | Path, fps: float = 16.0) -> Path:
    """`frames` (RGB images of one size) as an .mp4 at `path` (the container is mp4 whatever the
    name: atomic writes go through a temp name). An odd width or height loses its last pixel
    (yuv420p needs even sizes)."""
    import av  # noqa: PLC0415

    if not frames:
        raise ValueError("a video sample needs at least one frame")
    width, height = frames[0].size
    width, height = max(2, width - width % 2), max(2, height - height % 2)
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream(video_codec(), rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for image in frames:
            frame = av.VideoFrame.from_image(image.convert("RGB").crop((0, 0, width, height)))
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return Path(path)


def write_frames(frames: list[Image.Image], folder: str | Path, image_format: str) -> Path:
    """`frames` as an image sequence, `folder`/0000.png, 0001.png, ... (`image_format` "png" or
    "jpg"), written into a temp folder beside it and renamed into place, so a reader never sees
    half a sequence; an existing folder of that name is replaced. Returns the first frame's path."""
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    if not frames:
        raise ValueError("a video sample needs at least one frame")
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for i, image in enumerate(frames):
            image.convert("RGB").save(tmp / f"{i:04d}.{image_format}", format="JPEG" if image_format == "jpg" else "PNG")
        if folder.exists():
            shutil.rmtree(folder)
        tmp.chmod(0o755)
        tmp.replace(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder / f"0000.{image_format}"
