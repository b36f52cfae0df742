"""Decompression bombs: a PNG of a few hundred bytes whose header says 9400x9400 (88 megapixels)
or 20000x20000 is refused from its header, before a byte is decoded, with a message naming the
file and the limit: in the page's mask editor (its images and the layers the browser sends), and
in training's scan (PIL's own refusal threshold, set on purpose, worded as ours)."""

import struct
import zlib

import pytest
from PIL import Image

from ot_gradio.data import scan_concept
from ot_gradio.data.images import MAX_PIXELS, PAGE_MAX_PIXELS, ImageTooLargeError, load_rgb
from ot_gradio.tools.masks import MaskError, editor_value, filled_value, mask_from_editor


@pytest.fixture(autouse=True)
def _pil_limit_as_imported(monkeypatch):
    """PIL's limit as data/images.py sets it on import: a page test earlier in the same process
    lowers it (images.limit_page_images), which changes which check refuses first."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", MAX_PIXELS // 2)


def bomb_png(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height (greyscale), with one tiny compressed row."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * (width + 1))) + chunk(b"IEND", b"")


@pytest.mark.parametrize("size", [(9400, 9400), (20000, 20000)])
def test_the_mask_editor_refuses_a_bomb_by_name(tmp_path, size):
    path = tmp_path / "bomb.png"
    path.write_bytes(bomb_png(*size))
    assert path.stat().st_size < 2000
    for open_it in (lambda: editor_value(path), lambda: filled_value(path, True)):
        with pytest.raises(MaskError, match=rf"bomb\.png.*{size[0]}x{size[1]}|bomb\.png.*more than") as err:
            open_it()
        assert f"{PAGE_MAX_PIXELS / 1e6:.0f} megapixels" in str(err.value)
        assert "DecompressionBomb" not in str(err.value)


def test_a_bomb_sent_as_the_editors_layer_is_refused():
    with pytest.raises(MaskError, match="the editor's layer: 9400x9400 pixels"):
        mask_from_editor({"layers": [bomb_png(9400, 9400)]}, (64, 64))


def test_training_refuses_only_what_pil_refuses_and_says_so_plainly(tmp_path, make_concept, write_image):
    assert MAX_PIXELS == 2 * 89_478_485 and Image.MAX_IMAGE_PIXELS == MAX_PIXELS // 2
    path = tmp_path / "c" / "huge.png"
    write_image(tmp_path / "c" / "ok.png", 16, 16)
    path.write_bytes(bomb_png(20000, 20000))
    with pytest.raises(ImageTooLargeError) as err:
        load_rgb(path)
    assert str(err.value) == f"{path}: 400 megapixels is more than the 179 megapixels this opens; downscale the image"
    scan = scan_concept(make_concept(tmp_path / "c"))
    assert [i.relpath for i in scan.items] == ["ok.png"]
    [skipped] = scan.skipped
    assert "400 megapixels is more than" in skipped.reason and "DecompressionBombError" not in skipped.reason
