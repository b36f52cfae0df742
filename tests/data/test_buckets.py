import math

import pytest

from ot_gradio.data import assign_bucket, bucket_sizes, bucket_step
from ot_gradio.data.buckets import Bucketing, kohya_bucket_sizes


@pytest.mark.parametrize("resolution,step", [(1024, 64), (512, 64), (384, 32), (256, 32), (128, 16), (64, 8)])
def test_step_follows_resolution(resolution, step):
    assert bucket_step(resolution) == step


@pytest.mark.parametrize("resolution", [64, 128, 512, 768, 1024, (512, 768)])
def test_buckets_have_target_area_multiples_of_8_and_up_to_4_to_1(resolution):
    h, w = (resolution, resolution) if isinstance(resolution, int) else resolution
    sizes = bucket_sizes(resolution)
    assert (h, w) in sizes
    assert len(set(sizes)) == len(sizes)
    step = bucket_step(resolution)
    for bh, bw in sizes:
        assert bh % 8 == 0 and bw % 8 == 0
        if (bh, bw) != (h, w):
            assert bh % step == 0 and bw % step == 0
        assert abs(bh * bw / (h * w) - 1) < 0.2
    ratios = [bh / bw for bh, bw in sizes]
    assert max(ratios) == pytest.approx(4, rel=0.1) and min(ratios) == pytest.approx(0.25, rel=0.1)


def test_assign_nearest_aspect():
    assert assign_bucket(1000, 1000, 512) == (512, 512)
    assert assign_bucket(1500, 1000, 512) == (448, 640)
    wide = assign_bucket(2000, 1000, 512)
    tall = assign_bucket(1000, 2000, 512)
    assert wide == tall[::-1]
    for w, h in [(300, 1000), (1000, 700), (5000, 500)]:
        bh, bw = assign_bucket(w, h, 512)
        best = min(abs(math.log(sh / sw) - math.log(h / w)) for sh, sw in bucket_sizes(512))
        assert abs(math.log(bh / bw) - math.log(h / w)) == pytest.approx(best)
    assert assign_bucket(10000, 100, 512) == bucket_sizes(512)[0]


def test_bucketing_off_is_target_size():
    assert assign_bucket(2000, 1000, 512, enabled=False) == (512, 512)
    assert assign_bucket(2000, 1000, (512, 768), enabled=False) == (512, 768)


def test_tiny_resolution_distinct_buckets():
    assert assign_bucket(96, 64, 64) == (56, 80)
    assert assign_bucket(64, 96, 64) == (80, 56)


def test_custom_step():
    assert all(h % 32 == 0 and w % 32 == 0 for h, w in bucket_sizes(512, step=32))
    with pytest.raises(ValueError):
        bucket_sizes(512, step=12)


def test_no_upscale_gives_a_small_image_the_largest_bucket_it_covers():
    # a 1024 px SDXL run: a big image takes its 1024-area bucket either way
    assert assign_bucket(2000, 1500, 1024, no_upscale=True) == assign_bucket(2000, 1500, 1024)
    for width, height in ((640, 480), (512, 512), (700, 1100), (300, 1000)):
        small = assign_bucket(width, height, 1024, no_upscale=True)
        assert small[0] <= height and small[1] <= width and small[0] % 64 == 0 and small[1] % 64 == 0  # cropped, never scaled up
        assert small != assign_bucket(width, height, 1024)
        # the bucket of the largest resolution, in 64 px steps, whose bucket the image covers
        covered = [r for r in range(64, 1024, 64) if (lambda b: b[0] <= height and b[1] <= width)(assign_bucket(width, height, r, step=64))]
        assert small == assign_bucket(width, height, max(covered), step=64)
    assert assign_bucket(512, 512, 1024, no_upscale=True) == (512, 512)
    assert assign_bucket(640, 480, 1024, no_upscale=True) == (448, 576)  # its aspect's bucket at 512 px, the largest it covers
    assert assign_bucket(40, 40, 1024, no_upscale=True) == (64, 64)  # smaller than any bucket: the smallest
    # a target that is no multiple of the step, or not square: the largest step below it is tried first
    assert assign_bucket(980, 980, 1000, no_upscale=True) == (960, 960)
    assert assign_bucket(600, 600, (512, 768), no_upscale=True) == (576, 576)
    assert assign_bucket(640, 480, 1024, no_upscale=True, enabled=False) == (1024, 1024)  # without bucketing: the target


# sd-scripts' make_bucket_resolutions((w, h), min, max, step) gives these sets (run on its source;
# the counts of the others as it gives them), as (width, height) there and (height, width) here
KOHYA_512 = {(256, 1024), (256, 960), (256, 896), (256, 832), (320, 768), (320, 704), (384, 640), (448, 576), (512, 512),
             (576, 448), (640, 384), (704, 320), (768, 320), (832, 256), (896, 256), (960, 256), (1024, 256)}


@pytest.mark.parametrize("size,step,low,high,count", [((1024, 1024), 64, 256, 2048, 41), ((1024, 1024), 32, 64, 2048, 93),
                                                      ((512, 768), 64, 256, 1024, 19), ((1024, 1024), 256, 512, 2048, 9),
                                                      ((512, 512), 8, 256, 1024, 129), ((1024, 1024), 64, 256, 1024, 25)])
def test_kohya_buckets_are_sd_scripts(size, step, low, high, count):
    assert set(kohya_bucket_sizes((512, 512), 64, 256, 1024)) == KOHYA_512
    sizes = kohya_bucket_sizes(size, step, low, high)
    area = size[0] * size[1]
    assert len(sizes) == count and len(set(sizes)) == count
    square = int(math.sqrt(area)) // step * step
    assert (square, square) in sizes
    for h, w in sizes:
        assert h % step == 0 and w % step == 0 and h * w <= area and max(h, w) <= high
        assert (w, h) in sizes  # both ways round
    assert kohya_bucket_sizes((1024, 1024), 64, 250, 2000) == kohya_bucket_sizes((1024, 1024), 64, 192, 2048)  # rounded to the step


def test_kohya_bucketing_assigns_the_nearest_of_its_buckets_and_reads_the_config():
    kohya = Bucketing(kohya_step=64, min_side=256, max_side=1024)
    assert kohya.sizes(512) == tuple(sorted(KOHYA_512, key=lambda s: (s[0] / s[1], s)))
    assert kohya.assign(700, 500, 512) == (448, 576)
    assert kohya.assign(3000, 1000, 512) == (256, 832) != assign_bucket(3000, 1000, 512)  # 3:1; the aspect list has its own
    assert kohya.assign(640, 480, 1024) == (768, 1024)
    small = Bucketing(kohya_step=64, min_side=256, max_side=1024, no_upscale=True).assign(640, 480, 1024)
    assert small[0] <= 480 and small[1] <= 640 and small == kohya.assign(640, 480, 512)  # cropped, never scaled up
    assert Bucketing(enabled=False, kohya_step=64).assign(700, 500, 512) == (512, 512)
    # a small wide image with kohya's buckets and no upscaling: sd-scripts ignores the smallest side for it (here
    # kohya's buckets from one step up), so it keeps its shape instead of a 192 px square crop
    wide = Bucketing(kohya_step=64, min_side=256, max_side=2048, no_upscale=True).assign(1000, 240, 1024)
    assert wide == (192, 832) and wide[0] <= 240 and wide[1] <= 1000
    page = {"aspect_ratio_bucketing": True, "bucket_resolution_step": 32, "min_bucket_resolution": "", "max_bucket_resolution": 1536,
            "bucket_no_upscale": True}
    assert Bucketing.from_config(page, 16) == Bucketing(step=16, no_upscale=True, kohya_step=32, min_side=256, max_side=1536)
    assert Bucketing.from_config({}) == Bucketing()
    text = {"aspect_ratio_bucketing": "false", "bucket_no_upscale": "true", "bucket_resolution_step": "64.0"}  # typed as text
    assert Bucketing.from_config(text) == Bucketing(enabled=False, no_upscale=True, kohya_step=64)
