from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from ot_gradio.data.images import load_depth, load_mask, load_rgb, load_rgb_noting_transparency, mask_path_for, to_rgb


def test_alpha_is_composited_onto_white(tmp_path: Path):
    img = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    img.putpixel((0, 0), (0, 0, 255, 255))
    img.save(tmp_path / "a.png")
    out = load_rgb(tmp_path / "a.png")
    assert out.mode == "RGB"
    assert out.getpixel((1, 1)) == (255, 255, 255)
    assert out.getpixel((0, 0)) == (0, 0, 255)


def test_la_and_palette_with_transparency(tmp_path: Path):
    Image.new("LA", (4, 4), (10, 0)).save(tmp_path / "la.png")
    assert load_rgb(tmp_path / "la.png").getpixel((0, 0)) == (255, 255, 255)
    pal = Image.new("P", (4, 4), 1)
    pal.putpalette([0, 0, 0, 0, 255, 0] + [0] * 762)
    pal.putpixel((0, 0), 0)
    pal.info["transparency"] = 0
    pal.save(tmp_path / "p.png", transparency=0)
    out = load_rgb(tmp_path / "p.png")
    assert out.getpixel((0, 0)) == (255, 255, 255)
    assert out.getpixel((1, 1)) == (0, 255, 0)


def test_palette_without_transparency(tmp_path: Path, write_image):
    write_image(tmp_path / "x.png", 8, 8)
    Image.open(tmp_path / "x.png").convert("P", palette=Image.Palette.ADAPTIVE).save(tmp_path / "p.png")
    out = load_rgb(tmp_path / "p.png")
    assert out.mode == "RGB" and out.size == (8, 8)


def test_cmyk_jpeg(tmp_path: Path):
    Image.new("CMYK", (8, 8), (0, 255, 255, 0)).save(tmp_path / "c.jpg")
    r, g, b = load_rgb(tmp_path / "c.jpg").getpixel((4, 4))
    assert r > 200 and g < 60 and b < 60


def test_16_bit_greyscale_is_scaled_not_clipped(tmp_path: Path):
    arr = np.full((8, 8), 32768, dtype=np.uint16)
    Image.fromarray(arr).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    r, g, b = load_rgb(tmp_path / "g16.png").getpixel((0, 0))
    assert r == g == b and 120 <= r <= 135


def test_32_bit_int_mode_with_8_bit_values():
    img = Image.fromarray(np.full((4, 4), 100, dtype=np.int32), "I")
    assert to_rgb(img).getpixel((0, 0)) == (100, 100, 100)


def test_exif_orientation_applied(tmp_path: Path):
    img = Image.new("RGB", (40, 20), (0, 0, 0))
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90 on display
    img.save(tmp_path / "o.jpg", exif=exif)
    assert load_rgb(tmp_path / "o.jpg").size == (20, 40)


@pytest.mark.parametrize("content", [b"", b"not an image at all", b"\x89PNG\r\n\x1a\n\x00\x00"])
def test_unreadable_files_raise(tmp_path: Path, content: bytes):
    (tmp_path / "bad.png").write_bytes(content)
    with pytest.raises((OSError, SyntaxError, ValueError)):
        load_rgb(tmp_path / "bad.png")


def test_truncated_jpeg_raises(tmp_path: Path, write_image):
    write_image(tmp_path / "t.jpg", 64, 64)
    data = (tmp_path / "t.jpg").read_bytes()
    (tmp_path / "t.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(OSError):
        load_rgb(tmp_path / "t.jpg")


def test_mask_path_and_mask_mode(tmp_path: Path):
    assert mask_path_for(tmp_path / "a.b.jpg").name == "a.b-masklabel.png"
    Image.new("RGB", (4, 4), (255, 255, 255)).save(tmp_path / "m.png")
    mask = load_mask(tmp_path / "m.png")
    assert mask.mode == "L" and mask.getpixel((0, 0)) == 255


def test_a_mask_painted_white_on_a_transparent_layer_trains_only_where_painted(tmp_path: Path):
    """The usual GIMP / Photoshop export: transparent outside (black, not trained, whatever colour
    the transparent pixels keep), white inside; a half-transparent edge is half trained."""
    img = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    ImageDraw.Draw(img).ellipse((16, 16, 48, 48), fill=(255, 255, 255, 255))
    img.putpixel((1, 0), (255, 255, 255, 0))  # "save colour values from transparent pixels"
    img.putpixel((2, 0), (255, 255, 255, 128))
    img.save(tmp_path / "cat-masklabel.png")
    mask = load_mask(tmp_path / "cat-masklabel.png")
    assert mask.mode == "L" and mask.size == (64, 64)
    assert mask.getpixel((0, 0)) == 0 and mask.getpixel((1, 0)) == 0 and mask.getpixel((32, 32)) == 255
    assert 126 <= mask.getpixel((2, 0)) <= 130
    expected = np.asarray(Image.open(tmp_path / "cat-masklabel.png").convert("L"), dtype=np.float32) / 255  # OneTrainer
    expected[0, 1] = 0.0  # OneTrainer reads the hidden white there; 128/255 alpha reads half
    expected[0, 2] = 128 / 255
    np.testing.assert_allclose(np.asarray(mask, dtype=np.float32) / 255, expected, atol=2 / 255)


def test_la_and_palette_masks_with_transparency_read_transparent_as_black(tmp_path: Path):
    la = Image.new("LA", (4, 4), (255, 0))
    la.putpixel((1, 1), (255, 255))
    la.putpixel((2, 2), (100, 255))
    la.save(tmp_path / "la-masklabel.png")
    mask = load_mask(tmp_path / "la-masklabel.png")
    assert (mask.getpixel((0, 0)), mask.getpixel((1, 1)), mask.getpixel((2, 2))) == (0, 255, 100)
    pal = Image.new("P", (4, 4), 1)
    pal.putpalette([255, 255, 255, 255, 255, 255] + [0] * 762)  # both white; index 0 transparent
    pal.putpixel((0, 0), 0)
    pal.save(tmp_path / "p-masklabel.png", transparency=0)
    mask = load_mask(tmp_path / "p-masklabel.png")
    assert mask.getpixel((0, 0)) == 0 and mask.getpixel((1, 1)) == 255


def test_masks_without_transparency_read_as_before(tmp_path: Path):
    """Grey, colour and opaque-alpha masks: their luminance, as OneTrainer reads them."""
    grey = np.arange(256, dtype=np.uint8).reshape(16, 16)
    Image.fromarray(grey, "L").save(tmp_path / "l.png")
    assert np.array_equal(np.asarray(load_mask(tmp_path / "l.png")), grey)
    rgb = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(rgb, "RGB").save(tmp_path / "rgb.png")
    luminance = np.asarray(Image.fromarray(rgb, "RGB").convert("L"))
    assert np.array_equal(np.asarray(load_mask(tmp_path / "rgb.png")), luminance)
    Image.fromarray(np.dstack([rgb, np.full((8, 8), 255, np.uint8)]), "RGBA").save(tmp_path / "opaque.png")
    assert np.array_equal(np.asarray(load_mask(tmp_path / "opaque.png")), luminance)
    Image.new("RGB", (4, 4), (0, 0, 0)).save(tmp_path / "black.jpg")
    assert load_mask(tmp_path / "black.jpg").getextrema() == (0, 0)


def test_training_images_note_their_transparency_and_stay_on_white(tmp_path: Path):
    Image.new("RGBA", (4, 4), (255, 0, 0, 0)).save(tmp_path / "clear.png")
    Image.new("RGBA", (4, 4), (255, 0, 0, 255)).save(tmp_path / "opaque.png")
    Image.new("RGB", (4, 4), (255, 0, 0)).save(tmp_path / "rgb.png")
    img, transparent = load_rgb_noting_transparency(tmp_path / "clear.png")
    assert transparent and img.mode == "RGB" and img.getpixel((0, 0)) == (255, 255, 255)
    assert not load_rgb_noting_transparency(tmp_path / "opaque.png")[1]
    assert not load_rgb_noting_transparency(tmp_path / "rgb.png")[1]


def test_depth_maps_load_as_floats_in_0_1_keeping_16_bit_steps(tmp_path: Path):
    """A `-depth` map of any bit depth: 8-bit grey, 16-bit grey (its steps kept, not cut to 8 bits), colour (luminance)."""
    ramp16 = np.array([[0, 1, 65534, 65535]], dtype=np.uint16)
    Image.fromarray(ramp16).save(tmp_path / "d16.png")
    Image.fromarray(np.array([[0, 51, 255]], dtype=np.uint8), "L").save(tmp_path / "d8.png")
    Image.new("RGB", (2, 1), (255, 255, 255)).save(tmp_path / "rgb.png")
    got16 = np.asarray(load_depth(tmp_path / "d16.png"))
    assert load_depth(tmp_path / "d16.png").mode == "F" and got16[0, 1] > 0 and got16[0, 2] < 1
    np.testing.assert_allclose(got16, ramp16 / 65535, atol=1e-7)
    np.testing.assert_allclose(np.asarray(load_depth(tmp_path / "d8.png")), [[0, 0.2, 1]], atol=1e-7)
    np.testing.assert_allclose(np.asarray(load_depth(tmp_path / "rgb.png")), [[1, 1]], atol=1e-7)
