import hashlib
import os
from pathlib import Path

import pytest
import torch
from PIL import Image

from ot_gradio.data import Batch, DataError, build_dataset
from ot_gradio.data.buckets import Bucketing


def _all_batches(dataset, epoch) -> list[Batch]:
    return list(dataset.epoch_batches(epoch))


def _folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        st = path.stat()
        h.update(f"{path.relative_to(folder)}|{st.st_mtime_ns}|{st.st_size}".encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def test_pixel_batches_fields(simple_folder, make_concept):
    dataset = build_dataset([make_concept(simple_folder, loss_weight=2.0)], "64", 2, seed=1)
    batches = _all_batches(dataset, 0)
    assert dataset.steps_per_epoch == len(batches) == 3
    assert sorted(b.size for b in batches) == [(48, 88), (64, 64), (64, 64)]
    for b in batches:
        h, w = b.size
        assert b.pixels.shape == (2, 3, h, w) and b.latents is None and b.mask is None
        assert b.pixels.min() >= -1 and b.pixels.max() <= 1
        assert torch.equal(b.loss_weights, torch.tensor([2.0, 2.0]))
        assert len(b.image_paths) == len(b.captions) == len(b) == 2
    captions = {c for b in batches for c in b.captions}
    assert captions == {"caption 0", "caption 1", "caption 2", "caption 3", "caption 4", ""}
    assert dataset.summary()["concepts"][0]["uncaptioned"] == 1


def test_multi_resolution_batches_are_uniform_and_remainders_dropped(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    for i in range(13):
        write_image(folder / f"{i:02d}.png", 48 + 8 * (i % 3), 48)
    dataset = build_dataset([make_concept(folder)], "64,128", 3, seed=5)
    seen_sizes = set()
    for epoch in range(4):
        epoch_batches = dataset.epoch_batches(epoch)
        plan = epoch_batches.plan
        assert plan.sample_count == 13
        assert plan.sample_count - plan.dropped_samples == 3 * len(epoch_batches)
        assert all(n < 3 for n in plan.dropped.values())
        assert dataset.steps_in_epoch(epoch) == len(epoch_batches)
        for samples in plan.batches:
            assert len({s.variant.bucket for s in samples}) == 1
            assert len({s.variant.resolution for s in samples}) == 1
        seen_sizes |= {s.variant.resolution for samples in plan.batches for s in samples}
    assert seen_sizes == {(64, 64), (128, 128)}
    batch = dataset.epoch_batches(0)[0]
    assert batch.pixels.shape[-2:] == batch.size
    assert dataset.total_steps(4) == sum(dataset.steps_in_epoch(e) for e in range(4))


def test_dropped_counts_reported(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    for i in range(3):
        write_image(folder / f"{i}.png", 32, 32)
    write_image(folder / "wide.png", 128, 32)
    dataset = build_dataset([make_concept(folder)], "64", 2)
    assert dataset.steps_per_epoch == 1
    summary = dataset.summary()
    assert summary["dropped_samples"] == 2 and sum(summary["dropped_by_bucket"].values()) == 2
    assert dataset.dropped_samples(0) == 2


def test_batch_size_larger_than_every_bucket_raises(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    write_image(folder / "a.png", 32, 32)
    with pytest.raises(DataError, match="batch size 4"):
        build_dataset([make_concept(folder)], "64", 4)


def test_an_epoch_that_fills_no_batch_is_kept_when_later_ones_do(tmp_path, write_image, make_concept):
    """SAMPLES 2 of 2 square and 2 wide images at batch 2: an epoch whose two samples fall into
    different buckets trains no step, but one with both of a shape trains one; the run starts (the
    trainer says which epochs train nothing) where the first epoch's empty plan refused it."""
    folder = tmp_path / "c"
    for name in "ab":
        write_image(folder / f"{name}.png", 64, 64)
        write_image(folder / f"wide-{name}.png", 128, 64)
    concept = make_concept(folder, balancing=2, balancing_strategy="SAMPLES")
    for seed in range(40):
        dataset = build_dataset([concept], "64", 2, seed=seed)
        steps = [dataset.steps_in_epoch(e) for e in range(12)]
        if steps[0] == 0:
            break
    else:
        pytest.fail("no seed gave an empty first epoch")
    assert 1 in steps and dataset.steps_per_epoch == 1  # the first epoch with a step


def test_determinism_across_builds(simple_folder, make_concept):
    image = {"enable_random_flip": True, "enable_crop_jitter": True}
    concept = make_concept(simple_folder, balancing=2.5, image=image)
    a = build_dataset([concept], "64,128", 2, seed=3)
    b = build_dataset([concept], "64,128", 2, seed=3)
    for epoch in (0, 1):
        for x, y in zip(_all_batches(a, epoch), _all_batches(b, epoch), strict=True):
            assert x.captions == y.captions and x.image_paths == y.image_paths and x.size == y.size
            assert torch.equal(x.pixels, y.pixels)
    order = [p for batch in a.epoch_batches(0).plan.batches for p in batch]
    assert order != [p for batch in a.epoch_batches(1).plan.batches for p in batch]
    c = build_dataset([concept], "64,128", 2, seed=4)
    assert [s for x in c.epoch_batches(0).plan.batches for s in x] != order


def test_captions_vary_per_epoch_and_tags_shuffle(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    write_image(folder / "a.png", 32, 32)
    (folder / "a.txt").write_text("first\nsecond\n")
    dataset = build_dataset([make_concept(folder)], "64", 1)
    seen = {dataset.epoch_batches(e)[0].captions[0] for e in range(12)}
    assert seen == {"first", "second"}
    (folder / "a.txt").write_text("sks, red, round, shiny, small\n")
    concept = make_concept(folder, text={"enable_tag_shuffling": True, "keep_tags_count": 1})
    dataset = build_dataset([concept], "64", 1)
    captions = [dataset.epoch_batches(e).plan.batches[0][0].caption for e in range(12)]
    assert all(c.startswith("sks, ") for c in captions) and len(set(captions)) > 1
    assert all(sorted(c.split(", ")) == sorted(["sks", "red", "round", "shiny", "small"]) for c in captions)


def test_samples_strategy_and_loss_weights(tmp_path, write_image, make_concept):
    a, b = tmp_path / "a", tmp_path / "b"
    for i in range(3):
        write_image(a / f"{i}.png", 32, 32)
        write_image(b / f"{i}.png", 32, 32)
    concepts = [
        make_concept(a, balancing=7, balancing_strategy="SAMPLES", loss_weight=1.0),
        make_concept(b, balancing=1, loss_weight=3.0),
    ]
    dataset = build_dataset(concepts, "64", 1)
    batches = _all_batches(dataset, 0)
    assert len(batches) == 10
    by_folder = {}
    for batch in batches:
        by_folder.setdefault(Path(batch.image_paths[0]).parent.name, []).append(float(batch.loss_weights[0]))
    assert len(by_folder["a"]) == 7 and set(by_folder["a"]) == {1.0}
    assert len(by_folder["b"]) == 3 and set(by_folder["b"]) == {3.0}


def test_prior_prediction_concepts_are_trained_and_their_samples_marked(tmp_path, write_image, make_concept):
    """A PRIOR_PREDICTION concept's images are in the epoch like a STANDARD one's (they used to be left
    out with a warning); the batch marks its samples, whose target the step replaces."""
    a, b = tmp_path / "a", tmp_path / "b"
    for i in range(4):
        write_image(a / f"{i}.png", 32, 32)
        write_image(b / f"{i}.png", 32, 32)
    dataset = build_dataset([make_concept(a), make_concept(b, type="PRIOR_PREDICTION")], "64", 4, seed=3)
    assert not any("not supported" in w for w in dataset.warnings)
    rows, mixed = {}, False
    for batch in _all_batches(dataset, 0):
        flags = [False] * len(batch) if batch.prior_prediction is None else batch.prior_prediction.tolist()
        mixed |= len(set(flags)) == 2
        rows.update({Path(path).parent.name + Path(path).name: flag for path, flag in zip(batch.image_paths, flags, strict=True)})
    assert len(rows) == 8 and all(flag == name.startswith("b") for name, flag in rows.items())
    assert mixed  # a batch holds samples of both concepts
    only_standard = build_dataset([make_concept(a)], "64", 4)
    assert all(batch.prior_prediction is None for batch in _all_batches(only_standard, 0))


def test_batches_are_cut_at_kohyas_buckets(tmp_path, make_concept):
    """With a bucket step the batches' sizes are kohya's buckets (here 16 px steps at 64 px), not the aspect list's."""
    from ot_gradio.data.buckets import bucket_sizes, kohya_bucket_sizes

    folder = tmp_path / "wide"
    folder.mkdir()
    Image.new("RGB", (300, 100), (90, 90, 90)).save(folder / "a.png")  # 3:1
    kohya = Bucketing(kohya_step=16, min_side=16, max_side=256)
    size = build_dataset([make_concept(folder)], "64", 1, bucketing=kohya).epoch_batches(0)[0].size
    assert size == kohya.assign(300, 100, 64) == (32, 96) and size in kohya_bucket_sizes((64, 64), 16, 16, 256)
    assert build_dataset([make_concept(folder)], "64", 1, bucketing=Bucketing()).epoch_batches(0)[0].size in bucket_sizes(64)
    assert size not in bucket_sizes(64)


def test_masks_follow_image_crop_and_flip(tmp_path, make_concept):
    folder = tmp_path / "c"
    folder.mkdir()
    img = Image.new("RGB", (64, 32), (255, 255, 255))
    img.paste((0, 0, 0), (0, 0, 32, 32))  # left half black
    img.save(folder / "a.png")
    mask = Image.new("L", (32, 16), 0)
    mask.paste(255, (0, 0, 16, 16))  # half-size mask: left half white
    mask.save(folder / "a-masklabel.png")
    Image.new("RGB", (64, 32), (9, 9, 9)).save(folder / "b.png")
    concept = make_concept(folder, image={"enable_fixed_flip": True, "enable_crop_jitter": False})
    dataset = build_dataset([concept], "64", 2, bucketing=Bucketing())
    assert dataset.has_masks
    batch = dataset.epoch_batches(0)[0]
    h, w = batch.size
    assert batch.mask.shape == (2, 1, h, w)
    i = [Path(p).name for p in batch.image_paths].index("a.png")
    dark = batch.pixels[i, 0] < 0  # black part of the image
    marked = batch.mask[i, 0] > 0.5
    assert dark[:, -4:].all() and marked[:, -4:].all() and not marked[:, :4].any()  # flipped: now right
    assert (dark == marked).float().mean() > 0.95
    assert batch.mask[1 - i].eq(1).all()


def test_alpha_as_mask_masks_a_transparent_image_by_its_alpha_channel(tmp_path, make_concept):
    """kohya's alpha_mask: the opaque half trains (its black pixels too: the alpha, not the luminance,
    is the mask), the transparent half not; a -masklabel file wins; off, such an image has no mask."""
    folder = tmp_path / "c"
    folder.mkdir()
    art = Image.new("RGBA", (64, 32), (0, 0, 0, 255))
    art.paste((200, 50, 50, 0), (32, 0, 64, 32))  # right half transparent
    art.save(folder / "a.png")
    art.save(folder / "b.png")
    Image.new("L", (64, 32), 255).save(folder / "b-masklabel.png")
    Image.new("RGB", (64, 32), (9, 9, 9)).save(folder / "c.png")  # no alpha: no mask
    fixed = {"enable_crop_jitter": False}
    dataset = build_dataset([make_concept(folder, image={**fixed, "alpha_mask": True})], "64", 3, bucketing=Bucketing())
    items = {item.path.name: item for item in dataset.concepts[0].items}
    assert (items["a.png"].mask_from_alpha, items["b.png"].mask_from_alpha, items["c.png"].mask_path) == (True, False, None)
    batch = dataset.epoch_batches(0)[0]
    mask = {Path(p).name: batch.mask[i, 0] for i, p in enumerate(batch.image_paths)}
    w = mask["a.png"].shape[1]
    assert mask["a.png"][:, : w // 2 - 2].eq(1).all() and mask["a.png"][:, w // 2 + 2:].eq(0).all()
    assert mask["b.png"].eq(1).all() and mask["c.png"].eq(1).all()
    off = build_dataset([make_concept(folder, image=fixed)], "64", 3, bucketing=Bucketing())
    assert [item.mask_from_alpha for item in off.concepts[0].items] == [False] * 3


def test_latent_caching_counts_and_reuse(tmp_path, simple_folder, make_concept, encoder):
    cache = tmp_path / "cache"
    concept = make_concept(simple_folder)
    progress = []
    dataset = build_dataset(
        [concept],
        "64",
        2,
        latent_caching=True,
        cache_dir=cache,
        vae_id="v1",
        encode_fn=encoder,
        progress=lambda d, t: progress.append((d, t)),
    )
    assert encoder.images == 6 and dataset.cache_report.encoded == 6 and dataset.cache_report.hits == 0
    assert progress[0] == (0, 6) and progress[-1] == (6, 6)
    assert [d for d, _ in progress] == sorted(d for d, _ in progress)
    for epoch in range(3):
        for batch in dataset.epoch_batches(epoch):
            h, w = batch.size
            assert batch.latents.shape == (2, 4, h // 8, w // 8) and batch.pixels is None
    assert encoder.calls == dataset.cache_report.encode_calls

    second = type(encoder)()
    again = build_dataset([concept], "64", 2, latent_caching=True, cache_dir=cache, vae_id="v1", encode_fn=second)
    assert second.calls == 0 and again.cache_report.hits == 6
    for x, y in zip(_all_batches(dataset, 1), _all_batches(again, 1), strict=True):
        assert torch.equal(x.latents, y.latents)

    Image.new("RGB", (40, 40), (1, 2, 3)).save(simple_folder / "new.png")
    third = type(encoder)()
    build_dataset([concept], "64", 2, latent_caching=True, cache_dir=cache, vae_id="v1", encode_fn=third)
    assert third.images == 1 and third.calls == 1

    os.utime(simple_folder / "img0.png", ns=(1, 10**18))
    fourth = type(encoder)()
    build_dataset([concept], "64", 2, latent_caching=True, cache_dir=cache, vae_id="v1", encode_fn=fourth)
    assert fourth.images == 1

    other_vae = type(encoder)()
    build_dataset([concept], "64", 2, latent_caching=True, cache_dir=cache, vae_id="v2", encode_fn=other_vae)
    assert other_vae.images == 7


def test_caching_encodes_every_resolution_and_flip(tmp_path, simple_folder, make_concept, encoder):
    concept = make_concept(simple_folder, image={"enable_random_flip": True})
    dataset = build_dataset(
        [concept], "64,128", 2, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=encoder, encode_batch_size=3
    )
    assert encoder.images == 6 * 2 * 2 == dataset.cache_report.total
    for epoch in range(3):
        for _ in dataset.epoch_batches(epoch):
            pass
    assert encoder.images == 24
    flips = {s.variant.flip for e in range(3) for b in dataset.plan(e).batches for s in b}
    assert flips == {True, False}
    Image.new("RGB", (40, 40), (1, 2, 3)).save(simple_folder / "new.png")
    more = type(encoder)()
    build_dataset([concept], "64,128", 2, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=more)
    assert more.images == 4


def test_cached_latents_match_encoded_pixels(tmp_path, simple_folder, make_concept, encoder):
    concept = make_concept(simple_folder, image={"enable_crop_jitter": False})
    cached = build_dataset([concept], "64", 2, latent_caching=True, cache_dir=tmp_path / "c", vae_id="v", encode_fn=encoder)
    plain = build_dataset([concept], "64", 2)
    for x, y in zip(_all_batches(cached, 0), _all_batches(plain, 0), strict=True):
        assert x.image_paths == y.image_paths
        assert torch.allclose(x.latents, encoder(y.pixels), atol=1e-6)


def test_dataset_folder_is_never_written(tmp_path, simple_folder, make_concept, encoder):
    Image.new("L", (32, 32), 255).save(simple_folder / "img0-masklabel.png")
    (simple_folder / "special.csv").write_text("caption 1\n")
    before = _folder_digest(simple_folder)
    names_before = sorted(p.name for p in simple_folder.iterdir())
    image = {
        "enable_random_flip": True,
        "enable_random_rotate": True,
        "random_rotate_max_angle": 10,
        "enable_random_hue": True,
        "random_hue_max_strength": 0.2,
    }
    text = {
        "tag_dropout_enable": True,
        "tag_dropout_probability": 0.5,
        "tag_dropout_special_tags_mode": "WHITELIST",
        "tag_dropout_special_tags": "special.csv",
        "caps_randomize_enable": True,
        "caps_randomize_probability": 0.5,
    }
    concept = make_concept(simple_folder, image=image, text=text, image_variations=2)
    dataset = build_dataset([concept], "64,128", 2, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=encoder)
    for epoch in range(2):
        _all_batches(dataset, epoch)
    _all_batches(build_dataset([concept], "64", 2), 0)
    dataset.summary()
    assert sorted(p.name for p in simple_folder.iterdir()) == names_before
    assert _folder_digest(simple_folder) == before


def test_errors_before_training(tmp_path, write_image, make_concept, encoder):
    with pytest.raises(DataError) as info:
        build_dataset(
            [make_concept(tmp_path / "x", name="one"), make_concept(tmp_path / "y", name="two")],
            "64",
            1,
            latent_caching=True,
            cache_dir=tmp_path,
            encode_fn=encoder,
        )
    assert "one" in str(info.value) and "two" in str(info.value) and encoder.calls == 0
    folder = tmp_path / "ok"
    write_image(folder / "a.png", 16, 16)
    with pytest.raises(DataError, match="no enabled concept"):
        build_dataset([make_concept(folder, enabled=False)], "64", 1)
    bad_override = make_concept(folder, image={"enable_resolution_override": True, "resolution_override": "abc"})
    with pytest.raises(DataError, match="resolution override"):
        build_dataset([bad_override], "64", 1)
    with pytest.raises(DataError, match="resolution"):
        build_dataset([make_concept(folder)], "12", 1)


def test_disabled_concepts_skipped_and_resolution_override(tmp_path, write_image, make_concept):
    a, b = tmp_path / "a", tmp_path / "b"
    write_image(a / "1.png", 32, 32)
    write_image(b / "1.png", 32, 32)
    concepts = [
        make_concept(a, image={"enable_resolution_override": True, "resolution_override": "128"}),
        make_concept(b),
        make_concept(tmp_path / "missing", enabled=False),
    ]
    dataset = build_dataset(concepts, "64", 1)
    sizes = {Path(batch.image_paths[0]).parent.name: batch.size for batch in dataset.epoch_batches(0)}
    assert sizes == {"a": (128, 128), "b": (64, 64)}


def test_bucketing_off_gives_target_size(simple_folder, make_concept):
    dataset = build_dataset([make_concept(simple_folder)], "64", 2, bucketing=Bucketing(enabled=False))
    assert {b.size for b in dataset.epoch_batches(0)} == {(64, 64)}
    assert dataset.steps_per_epoch == 3


def test_no_upscale_trains_small_images_at_a_bucket_they_cover(tmp_path, write_image, make_concept):
    folder = tmp_path / "sizes"
    for i in range(2):
        write_image(folder / f"small{i}.png", 64, 64)  # half the training size
        write_image(folder / f"big{i}.png", 160, 160)
    sizes = {b.image_paths[0].split("/")[-1][:3]: b.size for b in _all_batches(build_dataset([make_concept(folder)], "128", 2), 0)}
    assert sizes == {"sma": (128, 128), "big": (128, 128)}  # scaled up, as OneTrainer does
    dataset = build_dataset([make_concept(folder)], "128", 2, bucketing=Bucketing(no_upscale=True))
    sizes = {b.image_paths[0].split("/")[-1][:3]: b.size for b in _all_batches(dataset, 0)}
    assert sizes == {"sma": (64, 64), "big": (128, 128)}
    assert all(b.pixels.shape[-2:] == b.size for b in _all_batches(dataset, 0))


def test_corrupt_cache_file_is_encoded_again(tmp_path, simple_folder, make_concept, encoder):
    concept = make_concept(simple_folder)
    build_dataset([concept], "64", 2, latent_caching=True, cache_dir=tmp_path / "c", vae_id="v", encode_fn=encoder)
    victim = next((tmp_path / "c" / "latents").rglob("*.safetensors"))
    victim.write_bytes(b"broken")
    again = type(encoder)()
    dataset = build_dataset([concept], "64", 2, latent_caching=True, cache_dir=tmp_path / "c", vae_id="v", encode_fn=again)
    assert again.images == 1
    assert len(_all_batches(dataset, 0)) == 3


def test_skipped_images_in_summary(simple_folder, make_concept):
    (simple_folder / "broken.jpg").write_bytes(b"")
    summary = build_dataset([make_concept(simple_folder)], "64", 2).summary()
    assert [s["path"].endswith("broken.jpg") for s in summary["concepts"][0]["skipped"]] == [True]
    assert summary["concepts"][0]["images"] == 6 and summary["steps_per_epoch"] == 3
