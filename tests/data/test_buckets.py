import math

import pytest

from ot_gradio.data import assign_bucket, bucket_sizes, bucket_step
from ot_gradio.data.buckets import Bucketing, kohya_bucket_sizes


@pytest.mark.parametrize("resolution,step", [(1024, 64), (512, 64), (384, 32), (256, 32), (128, 16), (64, 8)])
def test_step_follows_resolution(resolution, step):
    assert bucket_step(resolution) == step


@pytest.mark.parametrize("resolution", [64, 128, 512, 768, 1024, (512, 768)])
def test_buckets_have_target_area_multiples_of_the_step_and_up_to_4_to_1(resolution):
    h, w = (resolution, resolution) if isinstance(resolution, int) else resolution
    sizes = bucket_sizes(resolution)
    assert len(set(sizes)) == len(sizes)
    step = bucket_step(resolution)
    for bh, bw in sizes:
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
    for w, h in [(300, 1000), (1000, 700), (5000, 500), (1000, 885)]:
        bh, bw = assign_bucket(w, h, 512)
        best = min(abs(sh / sw - h / w) for sh, sw in bucket_sizes(512))  # OneTrainer's: linear in height / width
        assert abs(bh / bw - h / w) == pytest.approx(best)
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


def _sd_scripts_select_bucket(sizes, width, height):
    """sd-scripts' BucketManager.select_bucket (no_upscale off), written out: its buckets as (width, height)
    sorted, the image's own size when it is one, else the argmin of |bucket w/h - image w/h|."""
    resos = sorted((w, h) for h, w in sizes)
    if (width, height) in resos:
        return (height, width)
    errors = [abs(w / h - width / height) for w, h in resos]
    w, h = resos[errors.index(min(errors))]
    return (h, w)


def test_kohya_buckets_are_picked_as_sd_scripts_picks_them():
    """By width / height, linearly, as sd-scripts' select_bucket: in log scale (ours before) 105 of
    these 7200 sizes went to another bucket than sd-scripts'."""
    for step, resolution in ((64, 1024), (32, 512), (64, 768)):
        kohya = Bucketing(kohya_step=step, min_side=256, max_side=2048)
        sizes = kohya.sizes(resolution)
        for width in range(200, 3000, 7):
            for height in (300, 512, 777, 1024, 1500, 2048):
                assert kohya.assign(width, height, resolution) == _sd_scripts_select_bucket(sizes, width, height), (width, height)
        exact = sizes[len(sizes) // 3]
        assert kohya.assign(exact[1], exact[0], resolution) == exact


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


# OneTrainer's aspect buckets (mgds' AspectBucketing): the 9 aspect ratios up to 4:1 and their
# inverses at the square's area, each side rounded (Python's round) to the quantization of the
# family's data loader, duplicates dropped; the nearest by |h / w - bucket h / bucket w|
def _onetrainer_buckets(side: int, quantization: int) -> list[tuple[int, int]]:
    scaled = [(side / math.sqrt(a), side * math.sqrt(a)) for a in (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0)]
    scaled += [(w, h) for h, w in scaled]
    return list({(round(h / quantization) * quantization, round(w / quantization) * quantization) for h, w in scaled})


def _onetrainer_bucket(width: int, height: int, side: int, quantization: int) -> tuple[int, int]:
    buckets = _onetrainer_buckets(side, quantization)
    return buckets[min(range(len(buckets)), key=lambda i: abs(buckets[i][0] / buckets[i][1] - height / width))]


@pytest.mark.parametrize("model_type,side,quantization,examples", [
    ("STABLE_DIFFUSION_15", 512, 8, {(624, 416): (416, 624), (576, 456): (456, 576), (1000, 1000): (512, 512)}),
    ("STABLE_DIFFUSION_XL_10_BASE", 1024, 64, {(1000, 885): (896, 1152), (1000, 1000): (1024, 1024)}),
    ("FLUX_DEV_1", 1024, 64, {(3000, 2000): (832, 1280), (2000, 3000): (1280, 832)}),
    ("STABLE_CASCADE_1", 1024, 128, {(3000, 1200): (640, 1664), (3000, 1800): (768, 1408)}),
])
def test_step_0_buckets_are_onetrainers_for_each_family(model_type, side, quantization, examples):
    from ot_gradio.config.families import family_info

    info = family_info(model_type)
    bucketing = Bucketing.from_config({"model_type": model_type}, info.bucket_step)
    assert bucketing.quantization == quantization and bucketing.quantum(side) == quantization
    assert set(bucketing.sizes(side)) == set(_onetrainer_buckets(side, quantization))
    for (width, height), bucket in examples.items():  # (image width, height): OneTrainer's (height, width)
        assert bucketing.assign(width, height, side) == bucket == _onetrainer_bucket(width, height, side, quantization)
    for width in range(200, 3000, 7):
        for height in (300, 700, 1024, 1999):
            assert bucketing.assign(width, height, side) == _onetrainer_bucket(width, height, side, quantization)


def test_sd_15_at_512_and_flux_at_1024_have_onetrainers_sides():
    sd = Bucketing.from_config({"model_type": "STABLE_DIFFUSION_15"})
    assert {(416, 624), (456, 576), (296, 888)} <= set(sd.sizes(512)) and (448, 640) not in sd.sizes(512)
    flux = Bucketing.from_config({"model_type": "FLUX_DEV_1"}, 16)
    assert flux.assign(3000, 2000, 1024) == (832, 1280) and all(h % 64 == 0 and w % 64 == 0 for h, w in flux.sizes(1024))


def test_nearest_bucket_is_linear_in_aspect_not_log():
    sdxl = Bucketing(quantization=64)
    # 885 / 1000 = 0.885: 896 / 1152 = 0.778 is 0.107 away, 1.0 is 0.115 (in log scale 1.0 is nearer)
    assert sdxl.assign(1000, 885, 1024) == (896, 1152)
    log_nearest = min(sdxl.sizes(1024), key=lambda s: abs(math.log(s[0] / s[1]) - math.log(885 / 1000)))
    assert log_nearest == (1024, 1024)
    differ = 0
    for width in range(500, 4251):  # 3751 aspect ratios of a 1000 px tall image
        bucket = sdxl.assign(width, 1000, 1024)
        assert bucket == _onetrainer_bucket(width, 1000, 1024, 64)
        differ += bucket != min(sdxl.sizes(1024), key=lambda s: abs(math.log(s[0] / s[1]) - math.log(1000 / width)))
    assert differ > 50  # where the linear and the log nearest disagree


def test_a_lone_wxh_resolution_is_one_fixed_size_as_in_onetrainer():
    from ot_gradio.config.resolution import FixedSize, parse_resolutions

    (fixed,) = parse_resolutions("768x512")
    assert isinstance(fixed, FixedSize) and fixed == (512, 768)  # width 768, height 512
    sdxl = Bucketing(quantization=64)
    for width, height in ((1000, 1000), (3000, 1000), (500, 2000)):
        assert sdxl.assign(width, height, fixed) == (512, 768)
    assert sdxl.sizes(fixed) == ((512, 768),)
    assert Bucketing(quantization=64, no_upscale=True).assign(100, 100, fixed) == (512, 768)  # a fixed size stays fixed
    # its sides rounded to the quantization, as OneTrainer does: 600 / 64 = 9.4 -> 576, 1000 / 64 = 15.6 -> 1024
    assert Bucketing(quantization=64, step=16).assign(1000, 1000, parse_resolutions("1000x600")[0]) == (576, 1024)
    assert Bucketing(quantization=8).assign(1000, 1000, parse_resolutions("1000x600")[0]) == (600, 1000)
    # in a list, with kohya's buckets, or without bucketing, WxH is no fixed size (OneTrainer refuses a list of them)
    assert not any(isinstance(r, FixedSize) for r in parse_resolutions("768x512,512"))
    assert sdxl.assign(1000, 1000, parse_resolutions("768x512,512")[0]) == (640, 640)
    assert Bucketing(kohya_step=64).assign(1000, 1000, fixed) == (576, 576)
    assert Bucketing(enabled=False).assign(1000, 1000, fixed) == (512, 768)


def test_a_fixed_size_reaches_the_run_and_the_summary(tmp_path, write_image, make_concept):
    from ot_gradio.data import build_dataset

    folder = tmp_path / "c"
    for i, (w, h) in enumerate([(64, 64), (128, 64), (64, 128), (100, 90)]):
        write_image(folder / f"{i}.png", w, h)
    dataset = build_dataset([make_concept(folder)], "96x64", 1)
    assert dataset.summary()["concepts"][0]["buckets"] == {"96x64": 4}
    assert {b.size for b in dataset.epoch_batches(0)} == {(64, 96)}
    override = make_concept(folder, image={"enable_resolution_override": True, "resolution_override": "64x96"})
    assert build_dataset([override], "64", 1).summary()["concepts"][0]["buckets"] == {"64x96": 4}


def test_tiny_resolutions_keep_distinct_buckets_in_the_models_multiple():
    flux = Bucketing(quantization=64, step=16)
    assert flux.quantum(64) == flux.quantum(128) == 16 and flux.quantum(256) == 64  # OneTrainer's 64 from 4 x 64 px
    assert Bucketing(quantization=128).quantum(512) == 128 and Bucketing(quantization=128).quantum(256) == 32
    assert Bucketing(quantization=8).quantum(64) == 8  # SD: OneTrainer's 8 at every size
    for resolution in (64, 96, 128):
        sizes = flux.sizes(resolution)
        assert len(sizes) >= 5 and all(h % 16 == 0 and w % 16 == 0 for h, w in sizes)
    assert flux.assign(96, 64, 64) == (48, 80) and flux.assign(64, 96, 64) == (80, 48)
    sdxl = Bucketing(quantization=64)
    assert sdxl.assign(96, 64, 64) == (56, 80) and sdxl.assign(64, 96, 64) == (80, 56) and len(sdxl.sizes(128)) > 9


def test_a_changed_bucket_is_encoded_again_not_read_from_the_cache(tmp_path, write_image, make_concept, encoder):
    from ot_gradio.data import build_dataset

    folder = tmp_path / "c"
    write_image(folder / "wide.png", 300, 200)
    write_image(folder / "square.png", 200, 200)
    concept = make_concept(folder)

    def build(quantization, enc):
        return build_dataset([concept], "256", 1, bucketing=Bucketing(quantization=quantization), latent_caching=True,
                             cache_dir=tmp_path / "cache", vae_id="v", encode_fn=enc)

    build(8, encoder)  # the wide image at (208, 312)
    again = type(encoder)()
    dataset = build(64, again)  # (192, 320): encoded anew, the square one read back
    assert again.images == 1 and dataset.cache_report.hits == 1
    sizes = {b.size: b.latents.shape[-2:] for b in dataset.epoch_batches(0)}
    assert sizes == {(192, 320): (24, 40), (256, 256): (32, 32)}
