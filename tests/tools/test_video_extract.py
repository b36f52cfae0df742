"""Tools → Video: clips and images from a long video (ot_gradio/tools/video_extract.py), on
videos made here with PyAV: two scenes with a hard cut between them, inside black letterbox bars,
some frames blurred. What comes out is read back by the trainer's own clip reader."""

from fractions import Fraction

import numpy as np
import pytest
from PIL import Image, ImageFilter

from ot_gradio.data.video import FrameSampling, probe_clip, read_clip, video_codec
from ot_gradio.tools.jobs import JobError, run_inline
from ot_gradio.tools.video_extract import crop_box, cut_points, parse_time, pieces

W, H, BAR = 96, 64, 8  # the picture is 96 x 48 between two 8 px black bars
FPS = 10


def scene_frame(scene: int, i: int, blurred: bool = False) -> Image.Image:
    """Scene 0: red-green stripes drifting right; scene 1: a blue-white checker drifting down (as
    a camera pans: neighbouring frames alike, the cut a jump)."""
    y, x = np.mgrid[0:H - 2 * BAR, 0:W].astype(np.float32)
    if scene == 0:
        wave = (((x - i) // 6) % 2).astype(np.float32)
        picture = np.stack([200 * wave + 40, 200 * (1 - wave) + 40, 30 + 0 * wave], axis=-1)
    else:
        checker = (((x // 12) + ((y - i) // 12)) % 2).astype(np.float32)
        picture = np.stack([60 + 150 * checker, 60 + 150 * checker, 230 + 0 * checker], axis=-1)
    frame = np.zeros((H, W, 3), np.uint8)
    frame[BAR:H - BAR] = picture.astype(np.uint8)
    image = Image.fromarray(frame)
    if blurred:  # blurred inside the picture only: the bars stay black
        image.paste(image.crop((0, BAR, W, H - BAR)).filter(ImageFilter.GaussianBlur(3)), (0, BAR))
    return image


def write_video(path, frames, fps=FPS):
    import av

    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream(video_codec(), rate=Fraction(fps))
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for image in frames:
            for packet in stream.encode(av.VideoFrame.from_image(image)):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


@pytest.fixture(scope="module")
def two_scenes(tmp_path_factory):
    """3 s at 10 fps: scene 0 for 1.5 s, a cut, scene 1 for 1.5 s."""
    folder = tmp_path_factory.mktemp("videos")
    return write_video(folder / "holiday film.mp4", [scene_frame(0, i) for i in range(15)] + [scene_frame(1, i) for i in range(15)])


@pytest.fixture(scope="module")
def half_blurred(tmp_path_factory):
    """The same, with every other frame of scene 1 blurred (a shaky camera)."""
    folder = tmp_path_factory.mktemp("blurred")
    frames = [scene_frame(0, i) for i in range(15)] + [scene_frame(1, i, blurred=i % 2 == 1) for i in range(15)]
    return write_video(folder / "holiday film.mp4", frames)


def clip_frames(path):
    sampling = FrameSampling(frames=100, step=1, fps=100)
    return read_clip(path, sampling, probe_clip(path, sampling).available)


def scene_of(image: Image.Image) -> int:
    r, _, b = np.asarray(image, dtype=np.float32).reshape(-1, 3).mean(axis=0)
    return 0 if r > b else 1


def test_clips_split_at_the_cut_and_into_pieces_without_the_bars(two_scenes, tmp_path):
    out = tmp_path / "concept"
    result = run_inline("video", {"source": str(two_scenes), "output": str(out), "mode": "clips", "max_seconds": 1.0,
                                  "split_cuts": True, "remove_borders": True})
    assert result["cuts"] == 1 and result["written"] == 4 and result["failed"] == []
    names = sorted(p.name for p in out.iterdir())
    assert names == ["holiday_film_0001.mp4", "holiday_film_0002.mp4", "holiday_film_0003.mp4", "holiday_film_0004.mp4"]
    scenes = []
    for name in names:
        frames = clip_frames(out / name)
        assert frames[0].size == (W, H - 2 * BAR)  # the letterbox bars are gone
        assert len({scene_of(f) for f in frames}) == 1  # no clip runs across the cut
        assert 6 <= len(frames) <= 9  # 1.5 s scenes in two pieces of 0.7-0.8 s
        scenes.append(scene_of(frames[0]))
    assert scenes == [0, 0, 1, 1]
    # a second run adds, never overwrites
    again = run_inline("video", {"source": str(two_scenes), "output": str(out), "mode": "clips", "max_seconds": 5.0})
    assert again["written"] == 2 and sorted(p.name for p in out.iterdir())[-2:] == ["holiday_film_0005.mp4", "holiday_film_0006.mp4"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_without_cut_detection_a_range_at_a_new_frame_rate(two_scenes, tmp_path):
    result = run_inline("video", {"source": str(two_scenes.parent), "output": str(tmp_path / "o"), "mode": "clips",
                                  "split_cuts": False, "start": "0:00.5", "end": "2.5", "fps": 5, "max_seconds": 10})
    assert result["written"] == 1 and result["cuts"] == 0
    frames = clip_frames(tmp_path / "o" / "holiday_film_0001.mp4")
    assert len(frames) == 10  # 2 s at 5 fps
    assert frames[0].size == (W, H)  # borders kept
    assert [scene_of(f) for f in frames] == [0] * 5 + [1] * 5


def test_images_at_a_rate_with_the_blurriest_left_out(half_blurred, tmp_path):
    result = run_inline("video", {"source": str(half_blurred), "output": str(tmp_path / "img"), "mode": "images", "per_second": 10,
                                  "blur_drop": 0.25, "remove_borders": True, "subfolders": True})
    # 29 frames taken (one about every 0.1 s; the 30th time falls after the last frame), the 7 blurriest left out
    assert result["left_out_blurry"] == 7 and result["written"] == 22
    files = sorted((tmp_path / "img" / "holiday_film").glob("*.jpg"))
    assert len(files) == 22 and all(Image.open(f).size == (W, H - 2 * BAR) for f in files)
    assert not [p for p in (tmp_path / "img").rglob(".*")]  # the frames' staging folder is gone
    # the blurred frames (7 of scene 1's) are the ones that went: scene 1 keeps its 8 sharp frames
    assert sum(scene_of(Image.open(f).convert("RGB")) for f in files) == 8
    sparse = run_inline("video", {"source": str(half_blurred), "output": str(tmp_path / "few"), "mode": "images", "per_second": 1,
                                  "blur_drop": 0})
    assert sparse["written"] == 3  # one about every second of 3


def test_crop_variation_cuts_to_another_aspect_inside_the_picture():
    import random

    rng = random.Random(0)
    boxes = [crop_box((96, 64), (0, 8, 96, 56), 0.3, rng) for _ in range(50)]
    for left, top, right, bottom in boxes:
        assert 0 <= left < right <= 96 and 8 <= top < bottom <= 56 and (right - left) % 2 == 0 and (bottom - top) % 2 == 0
    aspects = {round((r - left) / (b - t), 2) for left, t, r, b in boxes}
    assert len(aspects) > 10 and min(aspects) < 2.0 - 0.2 < 2.0 + 0.2 < max(aspects)


def test_cuts_and_pieces():
    scores = [0, 2, 3, 2, 90, 3, 2, 2, 25, 30, 28]  # a cut at 4; 8-10 is motion, not a cut
    assert cut_points(scores) == [4]
    times = [i / 10 for i in range(30)]
    assert pieces(times, [15], 1.0) == ([(0, 8), (8, 15), (15, 23), (23, 30)], 0)
    assert pieces(times, [2, 15], 5.0) == ([(2, 15), (15, 30)], 1)  # 0.2 s before the first cut: too short


def test_a_video_left_in_the_concept_folder_is_named(two_scenes, tmp_path):
    """Cut into clips in its own folder, the long video would be trained too (as one more clip)."""
    from ot_gradio.ui.tools_video import VideoTool

    folder = tmp_path / "concept"
    folder.mkdir()
    video = folder / "long.mp4"
    video.write_bytes(two_scenes.read_bytes())
    result = run_inline("video", {"source": str(video), "output": str(folder), "max_seconds": 5})
    assert result["inside_output"] == [str(video)] and result["written"] == 2
    summary, _ = VideoTool.render_result(result)
    assert "`long.mp4` is in the output folder too" in summary and "move it out" in summary
    assert "inside_output" not in run_inline("video", {"source": str(video), "output": str(tmp_path / "elsewhere")})


def test_bad_input_is_named(two_scenes, tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "broken.mp4").write_bytes(b"not a video")
    with pytest.raises(JobError, match="notes.txt is not a video file"):
        run_inline("video", {"source": str(tmp_path / "notes.txt"), "output": str(tmp_path / "o")})
    with pytest.raises(JobError, match="From: 'a minute' is no time"):
        run_inline("video", {"source": str(two_scenes), "output": str(tmp_path / "o"), "start": "a minute"})
    with pytest.raises(JobError, match="To: 1 s is not after From"):
        run_inline("video", {"source": str(two_scenes), "output": str(tmp_path / "o"), "start": "2", "end": "1"})
    result = run_inline("video", {"source": str(tmp_path), "output": str(tmp_path / "o"), "mode": "clips"})
    assert result["failed"][0]["file"].endswith("broken.mp4") and "cannot be opened" in result["failed"][0]["reason"]
    assert parse_time("1:02:03.5", "x") == 3723.5 and parse_time("", "x") is None


def test_the_page_tool_checks_the_form_then_runs_in_the_worker(two_scenes, tmp_path):
    """Tools → Video: paths outside the page's folders and bad times are named before anything
    starts; a run through the job worker makes the clips and shows them."""
    import gradio as gr

    from ot_gradio.runner.jobs import JobSupervisor
    from ot_gradio.ui.tools_tab import ToolsContext
    from ot_gradio.ui.tools_video import VideoTool
    from tests.tools.panel_wait import poll_to_end

    concept = tmp_path / "ws" / "datasets" / "film"
    concept.mkdir(parents=True)
    config = {"concepts": [{"path": str(concept)}]}
    with gr.Blocks():
        state = gr.State(config)
        ctx = ToolsContext(tmp_path / "ws", JobSupervisor(tmp_path / "ws"), state,
                           lambda c: [tmp_path / "ws", two_scenes.parent], config=config)
        tool = VideoTool(ctx)
    assert tool.output.value == str(concept)  # the first concept's folder
    form = {tool.source: str(two_scenes), tool.recursive: False, tool.output: str(concept), tool.subfolders: False, tool.mode: "clips",
            tool.start: "", tool.end: "", tool.max_seconds: 5, tool.split_cuts: True, tool.fps: 0, tool.per_second: 1,
            tool.blur_drop: 0.2, tool.borders: True, tool.crop: 0, tool.seed: 42, ctx.config_state: config}
    refused = tool.on_start({**form, tool.source: "/etc/passwd"})
    assert refused[0] == "" and refused[2].startswith("**not started** Video: ")
    refused = tool.on_start({**form, tool.output: "/etc/clips"})
    assert refused[0] == "" and refused[2].startswith("**not started** Output folder: ")
    refused = tool.on_start({**form, tool.end: "soon"})
    assert refused[0] == "" and "To: 'soon' is no time" in refused[2]
    job_id, *_ = tool.on_start(form)
    assert job_id
    out = poll_to_end(tool.panel, job_id)
    summary, gallery = out[-2:]
    assert summary.startswith("**2 clips** from 1 video into") and "cuts found: 1" in summary, summary
    assert [name for _, name in gallery["value"]] == ["holiday_film_0001.mp4", "holiday_film_0002.mp4"]
    assert sorted(p.name for p in concept.iterdir()) == ["holiday_film_0001.mp4", "holiday_film_0002.mp4"]


def test_the_command_line(two_scenes, tmp_path, capsys):
    from ot_gradio.cli import main as cli_main

    assert cli_main(["video", str(two_scenes), "--out", str(tmp_path / "frames"), "--images", "--per-second", "2", "--blur-drop", "0"]) == 0
    assert len(list((tmp_path / "frames").glob("holiday_film_*.jpg"))) == 6
    assert "6 images from 1 video(s)" in capsys.readouterr().err
    assert cli_main(["video", str(tmp_path / "none.mp4"), "--out", str(tmp_path / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err
