"""Masked training's mask augmentations through the dataset: circular shrink, rotate and crop."""

import numpy as np
import pytest
import torch
from PIL import Image

from ot_gradio.data import build_dataset
from ot_gradio.data.batches import latent_key, render_mask, render_pixels

SHRINK = {"enable_crop_jitter": False, "enable_random_circular_mask_shrink": True}
ROTATE_CROP = {"enable_crop_jitter": False, "enable_random_mask_rotate_crop": True}


@pytest.fixture
def square(tmp_path):
    """A 256x192 blue image with a red 32 px square, masked (white) where it is red."""
    folder = tmp_path / "c"
    folder.mkdir()
    img = Image.new("RGB", (256, 192), (0, 0, 255))
    img.paste((255, 0, 0), (160, 32, 192, 64))
    img.save(folder / "a.png")
    mask = Image.new("L", (128, 96), 0)  # half size: mapped onto the image
    mask.paste(255, (80, 16, 96, 32))
    mask.save(folder / "a-masklabel.png")
    return folder


@pytest.fixture
def blob(tmp_path):
    """A 64x64 image whose mask is a large white rectangle, so a disc visibly cuts it."""
    folder = tmp_path / "b"
    folder.mkdir()
    Image.new("RGB", (64, 64), (90, 90, 90)).save(folder / "a.png")
    mask = Image.new("L", (64, 64), 0)
    mask.paste(255, (4, 8, 60, 56))
    mask.save(folder / "a-masklabel.png")
    return folder


def _first(dataset, epoch=0):
    sample = dataset.plan(epoch).batches[0][0]
    return dataset.concepts[0].items[sample.item], sample.variant


def test_circular_shrink_keeps_a_disc_of_the_mask_seeded_per_epoch(blob, make_concept):
    concept = make_concept(blob, image=SHRINK)
    dataset = build_dataset([concept], "64", 1, seed=3, masked_training=True)
    full = np.zeros((64, 64), dtype=bool)
    full[8:56, 4:60] = True
    ys, xs = np.mgrid[0:64, 0:64]
    draws = set()
    for epoch in range(4):
        item, variant = _first(dataset, epoch)
        cy, cx, radius = variant.augment.mask.shrink
        assert full[round(cy), round(cx)] and variant.augment.mask.box is None
        reach = np.sqrt((ys - cy) ** 2 + (xs - cx) ** 2)[full].max()
        assert 0.2 * reach - 1 <= radius <= reach + 1
        mask = render_mask(item, variant)[0].numpy() > 0.5
        assert np.array_equal(mask, full & ((ys - cy) ** 2 + (xs - cx) ** 2 <= radius**2))
        draws.add(variant.augment.mask)
    assert len(draws) == 4
    again = build_dataset([concept], "64", 1, seed=3, masked_training=True)
    assert torch.equal(again.epoch_batches(2)[0].mask, dataset.epoch_batches(2)[0].mask)
    # off, or without masked training: the mask as it is
    for plain in (build_dataset([make_concept(blob, image={"enable_crop_jitter": False})], "64", 1, seed=3, masked_training=True),
                  build_dataset([concept], "64", 1, seed=3)):
        item, variant = _first(plain)
        assert variant.augment.mask is None
        assert np.array_equal(render_mask(item, variant)[0].numpy() > 0.5, full)


def test_rotate_crop_cuts_image_and_mask_around_the_mask(square, make_concept):
    dataset = build_dataset([make_concept(square, image=ROTATE_CROP)], "64", 1, seed=1, masked_training=True)
    plain = build_dataset([make_concept(square, image={"enable_crop_jitter": False})], "64", 1, seed=1, masked_training=True)
    assert plain.epoch_batches(0)[0].mask.mean() < 0.03  # the square is 2% of the image
    angles = set()
    for epoch in range(3):
        batch = dataset.epoch_batches(epoch)
        draw = dataset.plan(epoch).batches[0][0].variant.augment.mask
        top, left, bottom, right = draw.box
        assert -20 <= draw.angle <= 20 and draw.shrink is None
        assert top <= 32 and left <= 160 and bottom >= 64 and right >= 192  # the box holds the mask...
        assert (bottom - top) * (right - left) >= 0.9 * 64 * 64  # ...grown to at least the resolution
        assert bottom - top < 192 and right - left < 256
        red, marked = batch[0].pixels[0, 0] > 0, batch[0].mask[0, 0] > 0.5
        assert batch[0].mask.mean() > 0.08  # the masked area now fills much of the sample
        assert (red == marked).float().mean() > 0.97  # image and mask turned and cut alike
        assert batch[0].original_sizes == [(bottom - top, right - left)]
        angles.add(draw.angle)
    assert len(angles) == 3
    again = build_dataset([make_concept(square, image=ROTATE_CROP)], "64", 1, seed=1, masked_training=True)
    assert torch.equal(again.epoch_batches(1)[0].pixels, dataset.epoch_batches(1)[0].pixels)


def test_turning_one_on_keeps_the_other_draws(square, make_concept):
    both = {**ROTATE_CROP, "enable_random_circular_mask_shrink": True}
    draws = {}
    for name, image in (("shrink", SHRINK), ("crop", ROTATE_CROP), ("both", both)):
        dataset = build_dataset([make_concept(square, image=image)], "64", 1, seed=4, masked_training=True)
        draws[name] = _first(dataset)[1].augment.mask
    assert draws["both"].shrink == draws["shrink"].shrink and draws["both"].angle == draws["crop"].angle


def test_cached_variations_key_their_draws(tmp_path, square, make_concept, encoder):
    both = {**ROTATE_CROP, "enable_random_circular_mask_shrink": True}
    kwargs = {"latent_caching": True, "vae_id": "v", "encode_fn": encoder, "seed": 2}
    dataset = build_dataset([make_concept(square, image=both, image_variations=3)], "64", 1, cache_dir=tmp_path / "a",
                            masked_training=True, **kwargs)
    variants = dataset.concepts[0].cached_variants(0)
    keys = {latent_key(dataset.cache, dataset.concepts[0].items[0], v) for v in variants}
    assert len({v.augment.mask for v in variants}) == len(keys) == dataset.cache_report.total == 3
    for epoch in range(3):
        batch, sample = dataset.epoch_batches(epoch)[0], dataset.plan(epoch).batches[0][0]
        item = dataset.concepts[0].items[0]
        assert torch.allclose(batch.latents, encoder(render_pixels(item, sample.variant).unsqueeze(0)), atol=1e-6)
    # without masked training nothing is drawn: the keys of a plain concept, reused
    unmasked = build_dataset([make_concept(square, image=both, image_variations=3)], "64", 1, cache_dir=tmp_path / "b", **kwargs)
    plain = build_dataset([make_concept(square, image={"enable_crop_jitter": False})], "64", 1, cache_dir=tmp_path / "b", **kwargs)
    assert unmasked.cache_report.total == 1 and plain.cache_report.hits == 1
