from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ot_gradio.data.images import load_depth, load_mask, load_rgb, mask_path_for, to_rgb


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
