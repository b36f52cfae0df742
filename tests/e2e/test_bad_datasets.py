"""A dataset with every kind of bad file trains to the end: each bad file is skipped (or used)
with a warning naming it, and nothing in the folder changes."""

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ot_gradio.config.io import load_config
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

pytestmark = pytest.mark.slow


class Collect(Reporter):
    def __init__(self):
        self.warnings = []
        self.statuses = []

    def warning(self, message):
        self.warnings.append(message)

    def status(self, status, message=""):
        self.statuses.append(status)


def _noise(width, height, seed, mode="RGB"):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8), "RGB").convert(mode)


def _digest(folder: Path) -> dict[str, str]:
    out = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(files):
            path = Path(root) / name
            out[str(path.relative_to(folder))] = "link" if path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
        out.update({str((Path(root) / d).relative_to(folder)) + "/": "dir" for d in dirs})
    return out


@pytest.fixture
def nasty(tmp_path):
    root = tmp_path / "nasty data"
    root.mkdir()
    good = [f"good {i}.png" for i in range(4)] + ["ünïcödé 画像.png", "name with  spaces.png"]
    for i, name in enumerate(good):
        _noise(64, 64, i).save(root / name)
        (root / name).with_suffix(".txt").write_text(f"a picture number {i}", encoding="utf-8")
    _noise(64, 64, 20).save(root / "latin1 caption.png")
    (root / "latin1 caption.txt").write_bytes("une fenêtre à Noël".encode("latin-1"))
    _noise(64, 64, 21).save(root / "empty caption.png")
    (root / "empty caption.txt").write_text("")
    _noise(64, 64, 22, "I;16").save(root / "sixteen bit.png")
    _noise(64, 64, 23, "CMYK").save(root / "cmyk.jpg")
    _noise(64, 64, 24, "P").save(root / "palette.png")
    _noise(64, 64, 25, "RGBA").save(root / "alpha.png")
    Image.new("RGB", (12000, 640), (90, 120, 200)).save(root / "huge panorama.png")
    _noise(8, 8, 26).save(root / "tiny.png")
    (root / "zero bytes.png").write_bytes(b"")
    (root / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    full = root / "truncated.jpg"
    _noise(64, 64, 27).save(full, quality=95)
    full.write_bytes(full.read_bytes()[:200])
    # masks: one of the wrong size, one in an odd mode, one unreadable
    Image.new("L", (17, 33), 255).save(root / "good 0-masklabel.png")
    Image.new("RGB", (64, 64), (255, 255, 255)).save(root / "good 1-masklabel.png")
    (root / "good 2-masklabel.png").write_bytes(b"not a png")
    # a symlink loop and a dangling link
    (root / "sub").mkdir()
    _noise(64, 64, 30).save(root / "sub" / "in sub.png")
    os.symlink(root, root / "sub" / "loop")
    os.symlink(root / "missing.png", root / "dangling.png")
    return root


def test_a_dataset_of_bad_files_trains_and_names_each_one(lora_config, nasty, tmp_path):
    before = _digest(nasty)
    data = lora_config(
        concepts=[{"name": "nasty", "path": str(nasty), "include_subdirectories": True}],
        samples=[], epochs=1, batch_size=1, masked_training=True, latent_caching=True,
    )
    run = tmp_path / "run"
    report = Collect()
    trainer = Trainer(load_config(data).config, RunPaths(run / "s", run / "b", run / "save", None, [run]), report)
    trainer.setup()
    assert trainer.train() == "done"
    text = "\n".join(report.warnings)
    for name in ("zero bytes.png", "corrupt.png", "truncated.jpg", "dangling.png", "good 2-masklabel.png",
                 "good 0-masklabel.png", "latin1 caption.txt"):
        assert name in text, f"no warning names {name}:\n{text}"
    trained = {Path(item.path).name for item in trainer.dataset.concepts[0].items}
    for name in ("ünïcödé 画像.png", "name with  spaces.png", "huge panorama.png", "tiny.png", "cmyk.jpg",
                 "sixteen bit.png", "palette.png", "alpha.png", "latin1 caption.png", "empty caption.png", "in sub.png"):
        assert name in trained, f"{name} was not trained"
    assert Path(data["output_model_destination"]).is_file()
    assert _digest(nasty) == before, "training changed the dataset folder"
