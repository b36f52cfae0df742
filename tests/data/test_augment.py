import colorsys
import random

import numpy as np
import pytest
import torch
from PIL import Image

from ot_gradio.config.concept import ConceptImageConfig
from ot_gradio.data.augment import IDENTITY, Augment, AugmentSettings
from ot_gradio.data.pixels import adjust_colour, pixels_tensor, shift_hue
from ot_gradio.data.transform import CropBox, render


def _settings(**image) -> AugmentSettings:
    return AugmentSettings.from_config(ConceptImageConfig(**image))


def test_off_and_zero_strength_draw_nothing():
    rng = random.Random(0)
    state = rng.getstate()
    assert _settings().draw(rng) == IDENTITY
    assert _settings(enable_random_rotate=True, random_rotate_max_angle=0).draw(rng) == IDENTITY
    assert rng.getstate() == state and not _settings(enable_fixed_hue=True, random_hue_max_strength=0.4).random


def test_random_draws_stay_within_the_maximum_and_fixed_uses_it():
    settings = _settings(
        enable_random_rotate=True, random_rotate_max_angle=20,
        enable_random_brightness=True, random_brightness_max_strength=0.3,
        enable_random_contrast=True, random_contrast_max_strength=0.2,
        enable_random_saturation=True, random_saturation_max_strength=1.0,
        enable_random_hue=True, random_hue_max_strength=0.4,
    )  # fmt: skip
    assert settings.random
    rng = random.Random(3)
    draws = [settings.draw(rng) for _ in range(300)]
    angles = [d.angle for d in draws]
    assert -20 <= min(angles) < -15 and 15 < max(angles) <= 20
    assert all(0.7 <= d.brightness <= 1.3 and 0.8 <= d.contrast <= 1.2 and 0 <= d.saturation <= 2 for d in draws)
    assert all(-0.2 <= d.hue <= 0.2 for d in draws) and max(d.hue for d in draws) > 0.15  # hue: max / 2, as OneTrainer
    assert [settings.draw(random.Random(3)) for _ in range(2)] == [draws[0]] * 2
    fixed = _settings(
        enable_fixed_rotate=True, random_rotate_max_angle=15,
        enable_fixed_brightness=True, random_brightness_max_strength=0.25,
        enable_fixed_hue=True, random_hue_max_strength=0.5,
    ).draw(random.Random(0))  # fmt: skip
    assert fixed == Augment(angle=15, brightness=1.25, hue=0.25)
    both = _settings(enable_random_rotate=True, enable_fixed_rotate=True, random_rotate_max_angle=10)
    assert len({both.draw(rng).angle for _ in range(20)}) > 10  # random wins, as in OneTrainer


def _stripes() -> Image.Image:
    arr = np.zeros((32, 32, 3), np.uint8)
    arr[:, 12:20] = (200, 60, 20)  # a vertical orange bar on black
    return Image.fromarray(arr)


def test_rotation_turns_image_and_mask_alike_and_blackens_corners():
    crop = CropBox(0, 0, 32, 32)
    turned = np.asarray(render(_stripes(), crop, (32, 32), False, angle=90))
    assert turned[14:18, 2:30, 0].min() > 150 and turned[2:10, 14:18, 0].max() < 30  # the bar is now horizontal
    white = Image.new("RGB", (32, 32), (255, 255, 255))
    tilted = np.asarray(render(white, crop, (32, 32), False, angle=30))
    assert tilted[0, 0].max() == 0 and tilted[16, 16].min() == 255 and tilted.shape == (32, 32, 3)
    mask = render(_stripes().convert("L"), crop, (32, 32), False, Image.Resampling.BILINEAR, 90)
    assert np.array_equal(np.asarray(mask) > 40, turned[..., 0] > 40)


def test_colour_changes_match_their_definitions():
    torch.manual_seed(0)
    x = torch.rand(3, 8, 8)
    assert torch.allclose(adjust_colour(x.clone(), Augment(brightness=0.5)), x * 0.5)
    grey = (0.2989 * x[0] + 0.587 * x[1] + 0.114 * x[2]).mean()
    assert torch.allclose(adjust_colour(x.clone(), Augment(contrast=0.0)), grey.expand(3, 8, 8))
    flat = adjust_colour(x.clone(), Augment(saturation=0.0))
    assert torch.allclose(flat[0], flat[1]) and torch.allclose(flat[1], flat[2])
    assert adjust_colour(x.clone(), Augment(brightness=2.0)).max() <= 1.0
    for shift in (0.1, -0.3, 0.5):
        y = shift_hue(x, shift)
        for i, j in ((0, 0), (3, 5), (7, 7)):
            h, s, v = colorsys.rgb_to_hsv(*x[:, i, j].tolist())
            assert y[:, i, j].tolist() == pytest.approx(colorsys.hsv_to_rgb((h + shift) % 1, s, v), abs=1e-5)


def test_pixels_tensor_applies_colour_and_identity_is_unchanged():
    img = Image.new("RGB", (4, 4), (200, 100, 50))
    plain = pixels_tensor(img)
    assert torch.equal(plain, pixels_tensor(img, IDENTITY))
    darker = pixels_tensor(img, Augment(brightness=0.5))
    assert torch.allclose((darker + 1) / 2, (plain + 1) / 4, atol=1e-6)
    red_to_green = pixels_tensor(Image.new("RGB", (2, 2), (255, 0, 0)), Augment(hue=1 / 3))
    assert torch.allclose(red_to_green[:, 0, 0], torch.tensor([-1.0, 1.0, -1.0]), atol=1e-5)
