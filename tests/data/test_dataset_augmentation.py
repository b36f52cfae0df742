"""Augmentation through the whole dataset: per epoch without caching, per variation with it."""

from collections import Counter

import pytest
import torch
from PIL import Image

from ot_gradio.data import DataError, LatentCache, build_dataset
from ot_gradio.data.augment import IDENTITY, Augment
from ot_gradio.data.batches import render_pixels
from ot_gradio.data.transform import CropBox

ROTATE_AND_COLOUR = {
    "enable_crop_jitter": False,
    "enable_random_rotate": True,
    "random_rotate_max_angle": 30,
    "enable_random_brightness": True,
    "random_brightness_max_strength": 0.3,
    "enable_random_hue": True,
    "random_hue_max_strength": 0.2,
}


def _variants(dataset, epoch) -> dict:
    """{(image name, occurrence): variant} of one epoch."""
    seen: Counter = Counter()
    out = {}
    for batch in dataset.plan(epoch).batches:
        for s in batch:
            name = dataset.concepts[s.concept].items[s.item].path.name
            out[(name, seen[name])] = s.variant
            seen[name] += 1
    return out


def test_without_caching_every_epoch_draws_afresh_and_is_seeded(simple_folder, make_concept):
    concept = make_concept(simple_folder, image=ROTATE_AND_COLOUR)
    dataset = build_dataset([concept], "64", 2, seed=7)
    epochs = [_variants(dataset, e) for e in range(3)]
    for key in epochs[0]:
        augments = {epochs[e][key].augment for e in range(3)}
        assert len(augments) == 3 and all(-30 <= a.angle <= 30 and 0.7 <= a.brightness <= 1.3 for a in augments)
    again = build_dataset([concept], "64", 2, seed=7)
    for x, y in zip(dataset.epoch_batches(1), again.epoch_batches(1), strict=True):
        assert torch.equal(x.pixels, y.pixels)
    plain = build_dataset([make_concept(simple_folder, image={"enable_crop_jitter": False})], "64", 2, seed=7)
    assert not torch.equal(next(iter(dataset.epoch_batches(0))).pixels, next(iter(plain.epoch_batches(0))).pixels)


def test_fixed_rotation_turns_the_mask_with_the_image(tmp_path, make_concept):
    folder = tmp_path / "c"
    folder.mkdir()
    img = Image.new("RGB", (64, 64), (255, 255, 255))
    img.paste((0, 0, 0), (0, 0, 64, 24))  # black band at the top
    img.save(folder / "a.png")
    mask = Image.new("L", (32, 32), 0)
    mask.paste(255, (0, 0, 32, 12))  # half-size mask of the same band
    mask.save(folder / "a-masklabel.png")
    image = {"enable_fixed_rotate": True, "random_rotate_max_angle": 90, "enable_crop_jitter": False}
    batch = build_dataset([make_concept(folder, image=image)], "64", 1).epoch_batches(0)[0]
    dark = batch.pixels[0, 0] < 0
    marked = batch.mask[0, 0] > 0.5
    assert dark[:, :20].all() and not dark[:, 28:].any()  # counter-clockwise: the top band is now on the left
    assert (dark == marked).float().mean() > 0.95


def test_cached_variations_cycle_per_epoch_and_match_their_pixels(tmp_path, simple_folder, make_concept, encoder):
    concept = make_concept(simple_folder, image_variations=3, image=ROTATE_AND_COLOUR)
    dataset = build_dataset([concept], "64", 2, seed=5, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=encoder)
    assert encoder.images == dataset.cache_report.total == 6 * 3
    epochs = [_variants(dataset, e) for e in range(6)]
    for key in epochs[0]:
        first_cycle = {epochs[e][key] for e in range(3)}
        assert len(first_cycle) == 3 and {epochs[e][key] for e in range(3, 6)} == first_cycle
    for batch, samples in zip(dataset.epoch_batches(1), dataset.plan(1).batches, strict=True):
        items = [dataset.concepts[0].items[s.item] for s in samples]
        pixels = torch.stack([render_pixels(item, s.variant) for item, s in zip(items, samples, strict=True)])
        assert torch.allclose(batch.latents, encoder(pixels), atol=1e-6)

    again = type(encoder)()
    build_dataset([concept], "64", 2, seed=99, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=again)
    assert again.images == 0  # a new run seed reuses every cached variation

    wider = make_concept(simple_folder, image_variations=3, image={**ROTATE_AND_COLOUR, "random_rotate_max_angle": 45})
    changed = type(encoder)()
    build_dataset([wider], "64", 2, seed=5, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=changed)
    assert changed.images == 18  # a changed augmentation setting is encoded again


def test_repeats_within_an_epoch_take_successive_cached_variations(tmp_path, simple_folder, make_concept, encoder):
    """REPEATS 2 shows each image twice an epoch: in two of its variations, as MGDS's cache gives
    each round of its walk the next one (both showings took the epoch's one variation before)."""
    concept = make_concept(simple_folder, image_variations=2, image=ROTATE_AND_COLOUR, balancing=2.0)
    dataset = build_dataset([concept], "64", 2, seed=5, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=encoder)
    for epoch in range(3):
        variants = _variants(dataset, epoch)
        names = {name for name, _ in variants}
        assert len(names) == 6 and len(variants) == 12
        assert all(variants[name, 0].augment != variants[name, 1].augment for name in names), epoch


def test_variations_collapse_when_nothing_random_and_flip_doubles(tmp_path, simple_folder, make_concept, encoder):
    fixed = make_concept(
        simple_folder,
        image_variations=4,
        image={"enable_crop_jitter": False, "enable_fixed_brightness": True, "random_brightness_max_strength": 0.2},
    )
    build_dataset([fixed], "64", 2, latent_caching=True, cache_dir=tmp_path / "a", vae_id="v", encode_fn=encoder)
    assert encoder.images == 6
    flips = make_concept(simple_folder, image_variations=2, image={**ROTATE_AND_COLOUR, "enable_random_flip": True})
    counted = type(encoder)()
    dataset = build_dataset([flips], "64", 2, latent_caching=True, cache_dir=tmp_path / "b", vae_id="v", encode_fn=counted)
    assert counted.images == 6 * 2 * 2
    assert {v.flip for e in range(4) for v in _variants(dataset, e).values()} == {False, True}


def test_no_augmentation_keeps_the_cache_keys_of_older_versions(tmp_path, simple_folder, make_concept, encoder):
    cache = LatentCache(tmp_path, "v")
    args = ("/a.png", 1, 2, (64, 64), CropBox(0, 0, 64, 64), False, (64, 64))
    assert cache.key(*args) == cache.key(*args, IDENTITY) != cache.key(*args, Augment(angle=1.0))
    jitter = make_concept(simple_folder, image_variations=3, image={"enable_crop_jitter": True})
    first = build_dataset([jitter], "64", 2, latent_caching=True, cache_dir=tmp_path / "c", vae_id="v", encode_fn=encoder)
    prepared = first.concepts[0]
    counts = {item.path.name: len(prepared.cached_variants(i)) for i, item in enumerate(prepared.items)}
    assert all(counts[f"img{i}.png"] == 1 for i in range(4))  # square into a square bucket: nothing to jitter
    assert all(counts[f"img{i}.png"] > 1 for i in (4, 5)) and first.cache_report.total == sum(counts.values())
    one = type(encoder)()
    build_dataset([make_concept(simple_folder)], "64", 2, latent_caching=True, cache_dir=tmp_path / "c", vae_id="v", encode_fn=one)
    assert one.images == 0  # variation 0 of a jittered concept is the crop a single-variation cache has


def test_caption_augmentation_reaches_batches_and_is_seeded(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    for i in range(4):
        write_image(folder / f"{i}.png", 32, 32)
        (folder / f"{i}.txt").write_text("sks, red, round, shiny, small, cute\n")
    text = {
        "tag_dropout_enable": True,
        "tag_dropout_mode": "RANDOM",
        "tag_dropout_probability": 0.5,
        "caps_randomize_enable": True,
        "caps_randomize_probability": 0.5,
    }
    concept = make_concept(folder, text=text)
    a = build_dataset([concept], "64", 2, seed=1)
    captions = [c for e in range(5) for b in a.epoch_batches(e) for c in b.captions]
    assert all(c.startswith("sks") for c in captions) and len(set(captions)) > 12
    assert any(len(c.split(", ")) < 6 for c in captions) and any(c != c.lower() for c in captions)
    b = build_dataset([concept], "64", 2, seed=1)
    assert [c for e in range(5) for x in b.epoch_batches(e) for c in x.captions] == captions
    other = build_dataset([concept], "64", 2, seed=2)
    assert [c for e in range(5) for x in other.epoch_batches(e) for c in x.captions] != captions


def test_caption_setting_errors_name_the_concept(tmp_path, write_image, make_concept):
    folder = tmp_path / "c"
    write_image(folder / "a.png", 32, 32)
    text = {
        "tag_dropout_enable": True,
        "tag_dropout_probability": 0.2,
        "tag_dropout_special_tags_mode": "WHITELIST",
        "tag_dropout_special_tags": "nope.csv",
    }
    with pytest.raises(DataError, match="Concept 'faces': special tags file 'nope.csv' does not exist"):
        build_dataset([make_concept(folder, name="faces", text=text)], "64", 1)
