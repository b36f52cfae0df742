"""Clips as training items (data/video.py): frame sampling, the scan beside images, pixels with a
frame axis, the cache key and hostile clips named and skipped. Clips are generated in tmp."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from PIL import Image

from ot_gradio.data import build_dataset, scan_concept
from ot_gradio.data.buckets import Bucketing
from ot_gradio.data.errors import DataError
from ot_gradio.data.video import MAX_DECODED_FRAMES, ClipError, FrameSampling, probe_clip, read_clip
from tests.video_clips import write_clip, write_hostile_clips


@pytest.mark.parametrize(("name", "codec"), [("a.mp4", "mpeg4"), ("a.webm", "libvpx-vp9"), ("a.mkv", "mpeg4")])
@pytest.mark.parametrize(("frames", "fps", "expect"), [(25, 24, 9), (5, 24, 5), (8, 24, 5), (25, 12, 5), (1, 24, 1)])
def test_frame_sampling_counts(tmp_path, frames, fps, expect, name, codec):
    """A 9-frame 24 fps clip: the count is cut to 4k+1 and at most `frames`; 12 fps drops every
    other frame (5 of 9). WebM and MKV store times in whole milliseconds (frame 2 at 0.083 s, not
    0.0833 s): no frame is lost to that rounding."""
    clip = write_clip(tmp_path / name, frames=9, codec=codec)
    info = probe_clip(clip, FrameSampling(frames=frames, fps=fps))
    assert (info.width, info.height, info.frames) == (32, 32, expect)
    images = read_clip(clip, FrameSampling(frames=frames, fps=fps), info.frames)
    assert len(images) == expect and images[0].size == (32, 32)


@pytest.mark.parametrize(("name", "codec"), [("a.mp4", "mpeg4"), ("a.webm", "libvpx-vp9")])
def test_start_offset_and_dropped_frames_follow_timestamps(tmp_path, name, codec):
    clip = write_clip(tmp_path / name, frames=9, codec=codec)
    every = read_clip(clip, FrameSampling(frames=9), 9)
    half = read_clip(clip, FrameSampling(frames=5, fps=12), 5)
    late = read_clip(clip, FrameSampling(frames=5, start=4 / 24), 5)
    as_tensor = [torch.tensor(list(img.getdata())) for img in every]
    assert all(torch.equal(torch.tensor(list(img.getdata())), as_tensor[2 * i]) for i, img in enumerate(half))
    assert all(torch.equal(torch.tensor(list(img.getdata())), as_tensor[4 + i]) for i, img in enumerate(late))


def test_a_long_clip_decodes_only_what_it_trains_with(tmp_path):
    """10,000 frames (417 s): 25 are read, from the start or, by seeking, from 300 s on (without
    the seek the 7,200 frames before it would pass the cap on decoded frames)."""
    clip = write_clip(tmp_path / "long.mp4", frames=10_000, size=(16, 16))
    for start in (0.0, 300.0):
        assert probe_clip(clip, FrameSampling(frames=25, start=start)).frames == 25
    assert MAX_DECODED_FRAMES < 7_200


def test_hostile_clips_raise_clip_errors(tmp_path):
    for name, path in write_hostile_clips(tmp_path).items():
        with pytest.raises(ClipError) as err:
            probe_clip(path, FrameSampling())
        assert str(err.value), name
    with pytest.raises(ClipError, match="no frame"):
        probe_clip(write_clip(tmp_path / "short.mp4", frames=3), FrameSampling(start=10.0))


def test_clips_scan_beside_images_and_hostile_ones_are_named(tmp_path, write_image, make_concept):
    folder = tmp_path / "concept"
    write_clip(folder / "clip.mp4", frames=9)
    (folder / "clip.txt").write_text("a moving square")
    write_clip(folder / "short.webm", frames=3, codec="libvpx-vp9")
    write_image(folder / "still.png")
    hostile = write_hostile_clips(folder)
    concept = make_concept(folder)
    image_only = scan_concept(concept)
    assert [i.relpath for i in image_only.items] == ["still.png"] and image_only.items[0].frames == 0
    scan = scan_concept(concept, FrameSampling(frames=9))
    items = {i.relpath: i for i in scan.items}
    assert sorted(items) == ["clip.mp4", "short.webm", "still.png"]
    assert (items["clip.mp4"].frames, items["short.webm"].frames, items["still.png"].frames) == (9, 1, 1)
    assert items["clip.mp4"].captions == ("a moving square",)
    assert items["still.png"].sampling is None and items["clip.mp4"].sampling == FrameSampling(frames=9)
    assert sorted(s.path.name for s in scan.skipped) == sorted(p.name for p in hostile.values())
    for path in hostile.values():
        assert any(str(path) in w for w in scan.warnings)
    assert any("short.webm" in w and "trains with 1 of the 9 frames set" in w for w in scan.warnings)
    # Files trained: one kind of the folder's files (musubi-tuner's image_directory / video_directory), the others counted
    clips_only = scan_concept(make_concept(folder, image={"media": "CLIPS"}), FrameSampling(frames=9))
    assert sorted(i.relpath for i in clips_only.items) == ["clip.mp4", "short.webm"]
    assert any("its 1 images are left out (Files trained: CLIPS)" in w for w in clips_only.warnings)
    images_only = scan_concept(make_concept(folder, image={"media": "IMAGES"}), FrameSampling(frames=9))
    assert [i.relpath for i in images_only.items] == ["still.png"] and images_only.items[0].frames == 1
    assert any("clips are left out (Files trained: IMAGES)" in w for w in images_only.warnings)
    assert [i.relpath for i in scan_concept(make_concept(folder, image={"media": "CLIPS"})).items] == ["still.png"]  # image model
    (folder / "still.png").unlink()
    with pytest.raises(DataError, match=r"no images in folder .*Files trained is IMAGES; its 5 other files are left out"):
        scan_concept(make_concept(folder, image={"media": "IMAGES"}), FrameSampling(frames=9))


def test_video_dataset_batches_by_frames_and_keys_the_cache_on_sampling(tmp_path, write_image, make_concept):
    folder = tmp_path / "concept"
    for i in range(2):
        write_clip(folder / f"clip{i}.mp4", frames=9, seed=i)
    write_clip(folder / "short.mp4", frames=5)
    write_image(folder / "still.png")
    concept = make_concept(folder)
    dataset = build_dataset([concept], [(32, 32)], 1, frames=FrameSampling(frames=9))
    shapes = sorted(tuple(b.pixels.shape) for b in dataset.epoch_batches(0))
    assert shapes == [(1, 3, 1, 32, 32), (1, 3, 5, 32, 32), (1, 3, 9, 32, 32), (1, 3, 9, 32, 32)]
    pairs = build_dataset([concept], [(32, 32)], 2, frames=FrameSampling(frames=9))
    assert [tuple(b.pixels.shape) for b in pairs.epoch_batches(0)] == [(2, 3, 9, 32, 32)]

    encoded: list[tuple] = []

    def encode(pixels):
        encoded.append(tuple(pixels.shape))
        return pixels[:, :, :, ::8, ::8].mean(1, keepdim=True).repeat(1, 4, 1, 1, 1)

    def cached(sampling):
        return build_dataset([concept], [(32, 32)], 1, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v",
                             encode_fn=encode, frames=sampling)

    first = cached(FrameSampling(frames=9))
    assert first.cache_report.encoded == 4
    assert cached(FrameSampling(frames=9)).cache_report.encoded == 0
    assert cached(FrameSampling(frames=9, fps=12)).cache_report.encoded == 3  # the clips again, not the image
    latents = sorted(tuple(b.latents.shape) for b in first.epoch_batches(0))
    assert latents == [(1, 4, 1, 4, 4), (1, 4, 5, 4, 4), (1, 4, 9, 4, 4), (1, 4, 9, 4, 4)]


def test_clips_in_onetrainers_other_containers_scan_and_decode(tmp_path, make_concept):
    folder = tmp_path / "concept"
    for name, codec in [("a.mkv", "libvpx-vp9"), ("b.avi", "mpeg4"), ("c.m4v", "mpeg4"), ("d.flv", "flv"), ("e.WMV", "wmv2")]:
        write_clip(folder / name, frames=5, codec=codec)
    write_clip(folder / "f.mpeg", frames=5, fps=25, codec="mpeg1video")  # MPEG-1 has no 24 fps
    scan = scan_concept(make_concept(folder), FrameSampling(frames=5))
    assert [(i.relpath, i.frames) for i in scan.items] == [(n, 5) for n in ("a.mkv", "b.avi", "c.m4v", "d.flv", "e.WMV", "f.mpeg")]
    assert not scan.skipped
    assert [im.size for im in read_clip(folder / "e.WMV", FrameSampling(frames=5), 5)] == [(32, 32)] * 5


@pytest.mark.parametrize(("rotation", "turn"), [(-90, Image.Transpose.ROTATE_270), (90, Image.Transpose.ROTATE_90),
                                                (180, Image.Transpose.ROTATE_180)])
def test_a_clips_display_rotation_is_applied_as_players_do(tmp_path, make_concept, rotation, turn):
    """A phone's portrait clip is stored landscape with a display matrix (-90: a quarter turn
    clockwise); it trains upright, as players show it, and its bucket is portrait."""
    stored = write_clip(tmp_path / "stored.mp4", frames=5, size=(48, 32))
    phone = write_clip(tmp_path / "c" / "phone.mp4", frames=5, size=(48, 32), rotation=rotation)
    sampling = FrameSampling(frames=5)
    upright = (32, 48) if rotation % 180 else (48, 32)
    info = probe_clip(phone, sampling)
    assert (info.width, info.height) == upright
    assert [(i.width, i.height) for i in scan_concept(make_concept(tmp_path / "c"), sampling).items] == [upright]
    for plain, turned in zip(read_clip(stored, sampling, 5), read_clip(phone, sampling, 5), strict=True):
        assert turned.size == upright
        assert list(plain.transpose(turn).getdata()) == list(turned.getdata())


def test_a_clips_mask_is_read_for_masked_training(tmp_path, make_concept):
    """`clip-masklabel.png` beside `clip.mp4` is the clip's mask (for every frame), cut like its frames."""
    folder = tmp_path / "c"
    write_clip(folder / "clip.mp4", frames=5, size=(32, 32))
    mask = Image.new("L", (32, 32), 0)
    mask.paste(255, (0, 0, 16, 32))
    mask.save(folder / "clip-masklabel.png")
    scan = scan_concept(make_concept(folder), FrameSampling(frames=5))
    assert scan.items[0].mask_path == (folder / "clip-masklabel.png").resolve()
    dataset = build_dataset([make_concept(folder)], [(32, 32)], 1, frames=FrameSampling(frames=5))
    batch = next(iter(dataset.epoch_batches(0)))
    assert tuple(batch.pixels.shape) == (1, 3, 5, 32, 32) and tuple(batch.mask.shape) == (1, 1, 32, 32)
    assert batch.mask[0, 0, :, :16].min() == 1.0 and batch.mask[0, 0, :, 16:].max() == 0.0


def test_a_clips_frames_are_cut_with_its_mask_by_the_mask_augmentations(tmp_path):
    """Random mask rotate and crop turns and cuts each frame of a clip as it does its mask, so the
    mask stays on what it covers."""
    import av
    import numpy as np

    from ot_gradio.config.concept import ConceptConfig

    folder = tmp_path / "c"
    folder.mkdir()
    with av.open(str(folder / "clip.mp4"), "w") as out:  # a white box on black, where the mask is white
        stream = out.add_stream("mpeg4", rate=24)
        stream.width, stream.height, stream.pix_fmt = 160, 96, "yuv420p"
        frame = np.zeros((96, 160, 3), np.uint8)
        frame[20:60, 100:140] = 255
        for _ in range(5):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    mask = Image.new("L", (160, 96), 0)
    mask.paste(255, (100, 20, 140, 60))
    mask.save(folder / "clip-masklabel.png")
    concept = ConceptConfig(name="c", path=str(folder), image={"enable_random_mask_rotate_crop": True})
    batch = build_dataset([concept], "64", 1, masked_training=True, bucketing=Bucketing(enabled=False),
                          frames=FrameSampling(frames=5)).epoch_batches(0)[0]
    assert tuple(batch.pixels.shape) == (1, 3, 5, 64, 64)
    inside = batch.mask[0, 0] > 0.9
    bright = batch.pixels[0].mean(dim=(0, 1)) > 0.5  # [-1, 1] pixels, every frame alike
    assert 0.05 < inside.float().mean() < 0.95
    assert (inside == bright).float().mean() > 0.95


def _frames_at(clip, start, frames=5):
    return torch.stack([torch.tensor(list(img.getdata()), dtype=torch.float32) for img in
                        read_clip(clip, FrameSampling(frames=frames, start=start), frames)])


def _batch_frames(batch):
    """A one-clip batch's frames as read_clip gives them (pixels back to 0..255, [frames, H*W, 3])."""
    pixels = (batch.pixels[0] + 1) * 127.5  # [3, F, H, W]
    return pixels.permute(1, 2, 3, 0).reshape(pixels.shape[1], -1, 3)


def test_the_random_clip_window_moves_over_a_long_clip_as_onetrainer_does(tmp_path, make_concept):
    """A 2 s clip trained at 5 frames: each epoch (no latent cache) trains a window starting at a
    random time that still fits; off, it is always the first 5 frames."""
    clip = write_clip(tmp_path / "c" / "long.mp4", frames=48)  # 2 s at 24 fps, the square moves each frame
    info = probe_clip(clip, FrameSampling(frames=5))
    assert info.duration == pytest.approx(2.0, abs=0.05) and info.slack == pytest.approx(2.0 - 1 / 24 - 4 / 24, abs=0.01)
    concept = make_concept(tmp_path / "c")
    moving = build_dataset([concept], [(32, 32)], 1, frames=FrameSampling(frames=5, random_window=True))
    offsets = [moving.plan(epoch).batches[0][0].variant.clip_offset for epoch in range(6)]
    assert len(set(offsets)) == 6 and all(0 <= o <= info.slack for o in offsets)
    batch = moving.epoch_batches(2)[0]
    assert torch.allclose(_batch_frames(batch), _frames_at(clip, offsets[2]), atol=1.5)  # the frames of that window
    assert not torch.allclose(_batch_frames(batch), _frames_at(clip, 0.0), atol=1.5)
    fixed = build_dataset([concept], [(32, 32)], 1, frames=FrameSampling(frames=5))
    assert {fixed.plan(epoch).batches[0][0].variant.clip_offset for epoch in range(3)} == {0.0}


@pytest.mark.parametrize("name", ["long.mkv", "long.mp4"])
def test_the_random_window_ends_with_the_video_not_a_longer_audio_track(tmp_path, name):
    """2.5 s of video with 6 s of sound: the window moves at most to the video's last frames (an MKV
    states only the container's length, the audio's), and at its latest it still has every frame."""
    clip = write_clip(tmp_path / name, frames=40, fps=16, audio_seconds=6.0)
    sampling = FrameSampling(frames=17, fps=16, random_window=True)
    info = probe_clip(clip, sampling)
    assert info.slack == pytest.approx(2.5 - 17 / 16, abs=0.002) and info.slack <= 2.5 - 17 / 16
    assert len(read_clip(clip, replace(sampling, start=info.slack), info.frames)) == 17


def test_with_the_latent_cache_each_variation_keeps_its_window(tmp_path, make_concept):
    write_clip(tmp_path / "c" / "long.mp4", frames=48)
    write_clip(tmp_path / "c" / "short.mp4", frames=5)  # no time to spare: its one window
    encoded: list = []

    def encode(pixels):
        encoded.append(pixels.shape[0])
        return pixels[:, :, :, ::8, ::8].mean(1, keepdim=True).repeat(1, 4, 1, 1, 1)

    def cached(variations):
        concept = make_concept(tmp_path / "c", image_variations=variations)
        return build_dataset([concept], [(32, 32)], 1, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=encode,
                             frames=FrameSampling(frames=5, random_window=True))

    one = cached(1)
    assert one.cache_report.encoded == 2
    windows = {s.variant.clip_offset for epoch in range(4) for b in one.plan(epoch).batches for s in b if s.item == 0}
    assert len(windows) == 1 and windows.pop() > 0  # one random window, kept every epoch
    three = cached(3)
    assert (three.cache_report.total, three.cache_report.encoded) == (4, 2)  # two more windows of the long clip
    long_windows = {s.variant.clip_offset for epoch in range(3) for b in three.plan(epoch).batches for s in b if s.item == 0}
    assert len(long_windows) == 3


def _picked(clip, sampling, frames, total):
    """The indices of the clip's frames that `sampling` reads (each frame matched to the clip's own)."""
    every = [torch.tensor(list(img.getdata()), dtype=torch.float32) for img in read_clip(clip, FrameSampling(frames=total), total)]
    got = [torch.tensor(list(img.getdata()), dtype=torch.float32) for img in read_clip(clip, sampling, frames)]
    return [min(range(total), key=lambda k: float((every[k] - frame).abs().mean())) for frame in got]


@pytest.mark.parametrize(("name", "codec", "total", "frames", "start"),
                         [("long.mp4", "mpeg4", 48, 5, 0.0), ("long.webm", "libvpx-vp9", 48, 5, 0.0),
                          ("long.mp4", "mpeg4", 300, 33, 0.0), ("late.mkv", "mpeg4", 120, 17, 1.0)])
def test_spread_frames_over_the_clip_picks_ai_toolkits_frames(tmp_path, make_concept, name, codec, total, frames, start):
    """Spread frames over the clip (ai-toolkit's shrink_video_to_frames): of a clip's n frames from
    Clip start on, frames round(i * (n - 1) / (k - 1)), its first and last included, whatever the
    random window says; a clip with fewer frames keeps them all; the latent cache keys on it."""
    from ot_gradio.data.video import spread_picks

    size = (8 + 3 * total, 16)  # the square at a place of its own in each frame
    clip = write_clip(tmp_path / "c" / name, frames=total, codec=codec, size=size)
    write_clip(tmp_path / "s" / "short.mp4", frames=5)
    concept = make_concept(tmp_path / "c", image={"clip_spread": True})
    run = FrameSampling(frames=frames, start=start, random_window=True)
    (item,) = scan_concept(concept, sampling=run).items
    (short,) = scan_concept(make_concept(tmp_path / "s", image={"clip_spread": True}), sampling=FrameSampling(frames=9)).items
    assert (item.frames, short.frames, item.sampling.random_window, item.slack) == (frames, 5, False, 0.0)
    skipped = round(start * 24)
    expected = [skipped + k for k in spread_picks(total - skipped, frames)]
    assert expected[0] == skipped and expected[-1] == total - 1 and len(set(expected)) == frames
    assert _picked(clip, item.sampling, item.frames, total) == expected
    assert _picked(write_clip(tmp_path / "s" / "short.mp4", frames=5), short.sampling, short.frames, 5) == [0, 1, 2, 3, 4]
    if total == 48:
        assert spread_picks(48, 5) == [0, 12, 24, 35, 47]  # ai-toolkit's int(round(i * 47 / 4))
        dataset = build_dataset([concept], [(32, 32)], 1, frames=run)
        assert {dataset.plan(epoch).batches[0][0].variant.clip_offset for epoch in range(3)} == {0.0}  # no window to move
        assert dataset.epoch_batches(0)[0].pixels.shape[2] == 5  # (a batch reads the item's own sampling: data/batches.py)
        (plain,) = scan_concept(make_concept(tmp_path / "c"), sampling=FrameSampling(frames=5)).items
        assert plain.sampling.key() != item.sampling.key() and item.sampling.key()["spread"]  # another latent cache entry


def test_a_window_the_clip_does_not_hold_trains_its_first_frames(tmp_path, make_concept, caplog):
    """A container that states a longer length than its frames: the moved window falls short, and
    the clip trains its first frames, said once in the log."""
    import logging

    clip = write_clip(tmp_path / "c" / "a.mp4", frames=9)
    dataset = build_dataset([make_concept(tmp_path / "c")], [(32, 32)], 1, frames=FrameSampling(frames=5, random_window=True))
    from dataclasses import replace

    items = dataset.concepts[0].scan.items
    items[0] = replace(items[0], slack=60.0)  # as if it said 60 s more
    with caplog.at_level(logging.WARNING, logger="ot_gradio.data.batches"):
        batch = dataset.epoch_batches(0)[0]
    assert batch.pixels.shape[2] == 5
    assert torch.allclose(_batch_frames(batch), _frames_at(clip, 0.0), atol=1.5)
    assert any("a.mp4" in r.message and "its first frames instead" in r.message for r in caplog.records)


def test_the_runs_random_clip_window_setting_reaches_the_sampling():
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.data.video import run_sampling

    assert run_sampling(TrainConfig(model_type="WAN_2_1"), 4).random_window is True  # OneTrainer's way, by default
    assert run_sampling(TrainConfig(model_type="WAN_2_1", random_clip_window=False), 4).random_window is False


def _animated_gif(path, colours, delays, transparent_corner=False):
    """A GIF of one frame per colour, each shown for its delay (ms); with `transparent_corner` its
    top-left pixel is transparent in every frame."""
    frames = []
    for colour in colours:
        frame = Image.new("RGBA", (32, 32), (*colour, 255))
        if transparent_corner:
            frame.putpixel((0, 0), (0, 0, 0, 0))
        frames.append(frame)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=list(delays), loop=0, disposal=2)
    return path


def test_a_gif_is_an_image_for_an_image_model_and_a_clip_for_a_video_model(tmp_path, make_concept):
    """GIFs were named as unread; a folder of them (pixel art, loops) trains: its first frame as an
    image, or every frame at its own time as a clip. Transparency is on white, as images'."""
    from ot_gradio.data.images import load_rgb

    folder = tmp_path / "gifs"
    folder.mkdir()
    red, green, blue = (250, 0, 0), (0, 250, 0), (0, 0, 250)
    _animated_gif(folder / "loop.gif", [red, green, blue] * 2, [100] * 6, transparent_corner=True)
    (folder / "loop.txt").write_text("a colour loop")
    concept = make_concept(folder)
    as_image = scan_concept(concept)
    assert [(i.relpath, i.frames, i.captions) for i in as_image.items] == [("loop.gif", 0, ("a colour loop",))]
    assert not as_image.warnings
    image = load_rgb(folder / "loop.gif")
    assert image.size == (32, 32) and image.getpixel((16, 16))[0] > 240 and image.getpixel((0, 0)) == (255, 255, 255)

    def colours(frames):
        return [max(range(3), key=lambda c, f=f: f.getpixel((16, 16))[c]) for f in frames]

    sampling = FrameSampling(frames=5, step=4, fps=10.0)
    as_clip = scan_concept(concept, sampling)
    assert [(i.relpath, i.frames) for i in as_clip.items] == [("loop.gif", 5)]  # 6 frames at 10 fps, cut to 4k+1
    frames = read_clip(folder / "loop.gif", sampling, 5)
    assert colours(frames) == [0, 1, 2, 0, 1] and frames[0].getpixel((0, 0)) == (255, 255, 255)  # transparency on white
    # each frame at its own time: at 5 fps every other one (0, 0.2, 0.4 s)
    assert colours(read_clip(folder / "loop.gif", FrameSampling(frames=3, step=2, fps=5.0), 3)) == [0, 2, 1]
