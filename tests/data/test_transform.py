import random

import numpy as np
import pytest
import torch
from PIL import Image

from ot_gradio.data.pixels import mask_tensor, pixels_tensor
from ot_gradio.data.transform import CropBox, choose_crop, cover_size, render


def test_cover_size_covers_bucket_and_keeps_aspect():
    assert cover_size(1000, 500, (256, 256)) == (256, 512)
    assert cover_size(100, 100, (64, 128)) == (128, 128)
    sh, sw = cover_size(333, 777, (320, 640))
    assert sh >= 320 and sw >= 640 and abs(sw / sh - 333 / 777) < 0.01


def test_centre_and_random_crop():
    assert choose_crop(200, 100, (64, 64)) == CropBox(0, 32, 64, 128)
    rng = random.Random(0)
    lefts = {choose_crop(200, 100, (64, 64), rng).left for _ in range(50)}
    assert min(lefts) >= 0 and max(lefts) <= 64 and len(lefts) > 10


def _gradient(width, height):
    x = np.tile(np.linspace(0, 255, width, dtype=np.float32), (height, 1))
    return Image.fromarray(np.stack([x, x, x], -1).astype(np.uint8))


def test_render_crops_the_right_window_and_flips():
    img = _gradient(200, 100)
    left = render(img, CropBox(0, 0, 64, 128), (64, 64), False)
    right = render(img, CropBox(0, 64, 64, 128), (64, 64), False)
    assert left.size == right.size == (64, 64)
    assert np.asarray(left).mean() < 100 < np.asarray(right).mean()
    flipped = render(img, CropBox(0, 0, 64, 128), (64, 64), True)
    assert np.array_equal(np.asarray(flipped), np.asarray(left)[:, ::-1])


def test_mask_of_another_size_lines_up_with_image():
    img = _gradient(200, 100)
    mask = _gradient(100, 50).convert("L")  # half-size mask with the same content
    crop = CropBox(0, 40, 64, 128)
    a = pixels_tensor(render(img, crop, (64, 64), True))[0]
    m = mask_tensor(render(mask, crop, (64, 64), True, Image.Resampling.BILINEAR))[0]
    assert torch.allclose((a + 1) / 2, m, atol=0.03)


def test_tensor_ranges():
    img = Image.new("RGB", (4, 4), (255, 0, 127))
    t = pixels_tensor(img)
    assert t.shape == (3, 4, 4) and t.dtype == torch.float32
    assert t[0].eq(1).all() and t[1].eq(-1).all() and t[2].abs().max() < 0.01
    m = mask_tensor(Image.new("L", (4, 4), 255))
    assert m.shape == (1, 4, 4) and m.eq(1).all()


@pytest.mark.parametrize("size", [(17, 301), (301, 17), (64, 64)])
def test_render_any_size_to_bucket(size):
    img = _gradient(*size)
    crop = choose_crop(size[0], size[1], (48, 72), random.Random(1))
    assert render(img, crop, (48, 72), False).size == (72, 48)
