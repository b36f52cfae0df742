"""Mask painting: editor values -> `<image>-masklabel.png` at the image's own size, and back."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from ot_gradio.data.images import mask_path_for
from ot_gradio.data.scan import scan_concept
from ot_gradio.tools.masks import (
    OVERLAY_RGB,
    MaskError,
    backup_path_for,
    editor_value,
    filled_value,
    mask_from_editor,
    overlay_preview,
    save_mask,
)

W, H = 300, 200


@pytest.fixture
def image(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    folder = tmp_path / "concept"
    folder.mkdir()
    path = folder / "photo.jpg"
    Image.fromarray(rng.integers(0, 255, (H, W, 3), dtype=np.uint8)).save(path, quality=95)
    return path


def stroke_layer(width: int, height: int, box: tuple[int, int, int, int], alpha: int = 255) -> np.ndarray:
    """An RGBA layer as the browser sends it: transparent except a painted rectangle (x0, y0, x1, y1)."""
    layer = np.zeros((height, width, 4), dtype=np.uint8)
    x0, y0, x1, y1 = box
    layer[y0:y1, x0:x1] = (*OVERLAY_RGB, alpha)
    return layer


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        assert img.mode == "L" and img.format == "PNG"
        return np.asarray(img).copy()


def test_downscaled_canvas_is_saved_at_image_size(image):
    layer = stroke_layer(150, 100, (20, 10, 60, 30))  # half-size canvas
    mask = mask_from_editor({"background": None, "layers": [layer], "composite": None}, (W, H))
    saved = save_mask(image, mask)
    assert saved == image.with_name("photo-masklabel.png")
    arr = pixels(saved)
    assert arr.shape == (H, W)
    assert set(np.unique(arr)) == {0, 255}
    ys, xs = np.nonzero(arr)
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == (40, 119, 20, 59)


def test_upscaled_pil_and_file_layers(image, tmp_path):
    big = Image.fromarray(stroke_layer(600, 400, (0, 0, 300, 400)), "RGBA")
    as_file = tmp_path / "layer.png"
    big.save(as_file)
    for layer in (big, str(as_file)):
        arr = np.asarray(mask_from_editor({"layers": [layer]}, (W, H)))
        assert arr.shape == (H, W)
        assert (arr[:, :150] == 255).all() and (arr[:, 150:] == 0).all()


def test_transparent_and_faint_pixels_are_black(image):
    layer = stroke_layer(W, H, (0, 0, W, H), alpha=0)
    layer[:, :10, 3] = 5  # antialiased fringe
    arr = np.asarray(mask_from_editor({"layers": [layer]}, (W, H)))
    assert (arr == 0).all()
    assert (np.asarray(mask_from_editor({"layers": []}, (W, H))) == 0).all()


def test_eraser_removes_from_a_loaded_mask(image):
    save_mask(image, Image.new("L", (W, H), 255))
    value = editor_value(image)
    value["layers"][0][50:100, 100:200, 3] = 0  # the eraser leaves transparent pixels
    arr = np.asarray(mask_from_editor(value, (W, H)))
    assert (arr[50:100, 100:200] == 0).all()
    assert (arr == 255).sum() == W * H - 50 * 100


def test_union_of_layers(image):
    value = {"layers": [stroke_layer(W, H, (0, 0, 10, 10)), stroke_layer(W, H, (290, 190, 300, 200))]}
    arr = np.asarray(mask_from_editor(value, (W, H)))
    assert (arr == 255).sum() == 200 and arr[0, 0] == 255 and arr[199, 299] == 255


def test_other_shape_and_empty_value_are_refused(image):
    with pytest.raises(MaskError, match="another shape"):
        mask_from_editor({"layers": [stroke_layer(200, 200, (0, 0, 5, 5))]}, (W, H))
    with pytest.raises(MaskError, match="open an image"):
        mask_from_editor(None, (W, H))


def test_existing_mask_round_trips_unchanged(image):
    rng = np.random.default_rng(1)
    original = np.where(rng.random((H, W)) > 0.5, 255, 0).astype(np.uint8)
    Image.fromarray(original, "L").save(mask_path_for(image))
    value = editor_value(image)
    assert value["background"].shape == (H, W, 3)
    layer = value["layers"][0]
    assert layer.shape == (H, W, 4)
    assert ((layer[:, :, 3] > 0) == (original == 255)).all()  # visible where the mask is white
    assert 0 < layer[:, :, 3].max() < 255  # semi-transparent overlay
    save_mask(image, mask_from_editor(value, (W, H)))
    assert (pixels(mask_path_for(image)) == original).all()


def test_fill_and_clear(image):
    full = np.asarray(mask_from_editor(filled_value(image, True), (W, H)))
    empty = np.asarray(mask_from_editor(filled_value(image, False), (W, H)))
    assert (full == 255).all() and (empty == 0).all()


def test_backup_atomic_and_scanner(image):
    folder = image.parent
    save_mask(image, Image.new("L", (W, H), 255))
    first = mask_path_for(image).read_bytes()
    save_mask(image, Image.new("L", (W, H), 0))
    backup = backup_path_for(mask_path_for(image))
    assert backup.name == "photo-masklabel.png.bak"
    assert backup.read_bytes() == first
    assert (pixels(mask_path_for(image)) == 0).all()
    assert sorted(p.name for p in folder.iterdir()) == ["photo-masklabel.png", "photo-masklabel.png.bak", "photo.jpg"]

    concept = SimpleNamespace(name="c", path=str(folder), include_subdirectories=False, text=SimpleNamespace(prompt_source="sample"))
    scan = scan_concept(concept)
    assert [item.path.name for item in scan.items] == ["photo.jpg"]
    assert scan.items[0].mask_path == mask_path_for(image).resolve()
    assert not any("masklabel" in w for w in scan.warnings)


def test_mask_size_mismatch_refused(image):
    with pytest.raises(MaskError, match="300x200"):
        save_mask(image, Image.new("L", (150, 100), 255))
    assert not mask_path_for(image).exists()


def test_overlay_preview_tints_the_mask(image):
    mask = Image.new("L", (W, H), 0)
    mask.paste(255, (0, 0, 150, 200))
    out = np.asarray(overlay_preview(image, mask), dtype=float)
    src = np.asarray(Image.open(image).convert("RGB"), dtype=float)
    assert out.shape == (H, W, 3)
    assert out[:, 150:].mean() < src[:, 150:].mean() * 0.5  # ignored area darkened
    assert out[:, :150, 0].mean() > src[:, :150, 0].mean()  # trained area tinted red


# --- the tool's handlers: path checks and the save message ------------------------------------

@pytest.fixture
def tool(image):
    import gradio as gr

    from ot_gradio.ui.tools_masks import MasksTool
    from ot_gradio.ui.tools_tab import ToolsContext

    root = image.parent
    with gr.Blocks():
        config = {"concepts": [{"path": str(root)}]}
        state = gr.State(config)
        ctx = ToolsContext(workspace=root, jobs=None, config_state=state, roots=lambda config: [root], config=config)
        return MasksTool(ctx)


def test_tool_opens_saves_and_refuses_outside(tool, image, tmp_path):
    config = {"concepts": [{"path": str(image.parent)}]}
    opened, folder, dropdown, value, overlay, note = tool.on_open("", config)
    assert opened == str(image.parent) and dropdown["value"] == "photo.jpg" and "300×200" in note
    value["layers"] = [stroke_layer(150, 100, (0, 0, 150, 50))]
    dropdown, overlay, note = tool.on_save(value, "photo.jpg", opened, config)
    assert note.startswith(f"saved {mask_path_for(image)} (300×200)")
    assert ("photo.jpg · mask", "photo.jpg") in dropdown["choices"]
    assert (pixels(mask_path_for(image))[:100] == 255).all()

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    Image.new("RGB", (10, 10)).save(outside / "x.png")
    *_, note = tool.on_open(str(outside), config)
    assert "outside" in note and "Folder" in note
    *_, note = tool.on_save(value, "../elsewhere/x.png", opened, config)
    assert "not saved" in note and not (outside / "x-masklabel.png").exists()
    *_, note = tool.on_save(value, "x.png", str(outside), config)
    assert "outside" in note and not (outside / "x-masklabel.png").exists()


def test_existing_mask_of_another_size_loads_at_image_size(image):
    small = Image.new("L", (150, 100), 0)
    small.paste(200, (0, 0, 75, 100))  # a grey value counts as white
    small.save(mask_path_for(image))
    layer = editor_value(image)["layers"][0]
    assert layer.shape == (H, W, 4)
    assert (layer[:, :150, 3] > 0).all() and (layer[:, 150:, 3] == 0).all()


def test_layers_without_alpha(image):
    rgb = np.zeros((H, W, 3), dtype=np.uint8)
    rgb[:20, :30] = OVERLAY_RGB
    arr = np.asarray(mask_from_editor({"layers": [rgb]}, (W, H)))
    assert (arr == 255).sum() == 600 and arr[0, 0] == 255


def test_failed_write_keeps_the_old_mask(image, monkeypatch):
    save_mask(image, Image.new("L", (W, H), 255))
    before = mask_path_for(image).read_bytes()

    def broken_save(self, fp, *args, **kwargs):
        Path(fp).write_bytes(b"half a png")
        raise OSError("disk full")

    monkeypatch.setattr(Image.Image, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_mask(image, Image.new("L", (W, H), 0))
    assert mask_path_for(image).read_bytes() == before
    assert not [p.name for p in image.parent.iterdir() if p.name.startswith(".")]


def test_a_clips_mask_is_painted_on_its_first_frame_at_its_upright_size(tmp_path):
    """A portrait phone clip (stored 48x32, turned -90) is listed, opened on its first frame at
    32x48, and its mask saved as `clip-masklabel.png`, which the scan takes as the clip's mask."""
    from ot_gradio.data.video import FrameSampling, read_clip
    from ot_gradio.tools.masks import image_size, list_images
    from tests.video_clips import write_clip

    folder = tmp_path / "clips"
    clip = write_clip(folder / "walk.mp4", frames=5, size=(48, 32), rotation=-90)
    Image.new("RGB", (16, 16)).save(folder / "still.png")
    assert [p.name for p in list_images(folder)] == ["still.png", "walk.mp4"]
    assert image_size(clip) == (32, 48)
    value = editor_value(clip)
    first = np.asarray(read_clip(clip, FrameSampling(frames=1, step=1), 1)[0])
    assert np.array_equal(value["background"], first)
    mask = mask_from_editor({"background": None, "layers": [stroke_layer(32, 48, (0, 0, 16, 48))], "composite": None}, (32, 48))
    assert save_mask(clip, mask) == folder / "walk-masklabel.png"
    scan = scan_concept(SimpleNamespace(name="c", path=str(folder), include_subdirectories=False,
                                        text=SimpleNamespace(prompt_source="sample")), FrameSampling(frames=5))
    assert {i.relpath: i.mask_path for i in scan.items}["walk.mp4"] == folder / "walk-masklabel.png"
