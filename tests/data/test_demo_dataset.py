import json
import pickle
from pathlib import Path

from PIL import Image

from ot_gradio.config.concept import ConceptConfig
from ot_gradio.data import build_dataset, ensure_demo_dataset


def test_demo_dataset_created_once_and_trainable(tmp_path, encoder):
    folder = ensure_demo_dataset(tmp_path / "demo")
    images = sorted(folder.glob("*.png"))
    assert 8 <= len(images) <= 12
    assert all((p.with_suffix(".txt")).read_text().startswith("a ") for p in images)
    sizes = {Image.open(p).size for p in images}
    assert (64, 64) in sizes and any(w != h for w, h in sizes)
    assert "a red circle on a white background" in {p.with_suffix(".txt").read_text().strip() for p in images}
    stamps = {p: p.stat().st_mtime_ns for p in folder.iterdir()}
    ensure_demo_dataset(folder)
    assert {p: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps

    concept = ConceptConfig(name="demo", path=str(folder))
    dataset = build_dataset([concept], "64", 1, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="tiny", encode_fn=encoder)
    assert len({b.size for b in dataset.epoch_batches(0)}) >= 2
    assert not dataset.warnings
    clone = pickle.loads(pickle.dumps(dataset))  # DataLoader workers need a picklable dataset
    assert clone.epoch_batches(0)[0].captions == dataset.epoch_batches(0)[0].captions


def _demo_preset() -> dict:
    return json.loads((Path(__file__).resolve().parents[2] / "presets" / "demo.json").read_text())


def _shape(label: str) -> str:
    width, height = (int(x) for x in label.split("x"))
    return "wide" if width > height else "tall" if height > width else "square"


def test_the_demo_trains_every_image_at_its_presets_batch_size_with_wide_and_tall_buckets(tmp_path):
    """A new user's first demo run: no image is left out as "never trained" (the warning the
    trainer gives from the same summary), and aspect bucketing has both a wide and a tall bucket."""
    preset = _demo_preset()
    assert preset["batch_size"] == 2 and preset.get("aspect_ratio_bucketing", True)
    folder = ensure_demo_dataset(tmp_path / "demo")
    dataset = build_dataset([ConceptConfig(name="demo", path=str(folder))], preset["resolution"], preset["batch_size"])
    summary = dataset.summary(preset["batch_size"])
    assert summary["never_trained"] == 0 and summary["concepts"][0]["never_trained"] == []
    assert summary["dropped_samples"] == 0 and summary["steps_per_epoch"] == 5
    shapes = {_shape(label): count for label, count in summary["concepts"][0]["buckets"].items()}
    assert shapes == {"square": 6, "wide": 2, "tall": 2}


def test_an_older_demo_folder_gains_the_tall_image_and_trains_every_image(tmp_path):
    """A demo folder made before image 09 became tall keeps its wide 09-purple-triangle (never
    removed) and gains the new tall image: 3 wide, 2 tall, still none never trained."""
    folder = tmp_path / "demo"
    folder.mkdir()
    Image.new("RGB", (96, 64), (255, 255, 255)).save(folder / "09-purple-triangle.png")
    (folder / "09-purple-triangle.txt").write_text("a purple triangle on a white background\n")
    ensure_demo_dataset(folder)
    assert (folder / "09-purple-triangle.png").exists() and (folder / "09-yellow-triangle.png").exists()
    summary = build_dataset([ConceptConfig(name="demo", path=str(folder))], "64", 2).summary(2)
    assert summary["never_trained"] == 0 and summary["steps_per_epoch"] == 5
    shapes = {_shape(label): count for label, count in summary["concepts"][0]["buckets"].items()}
    assert shapes == {"square": 6, "wide": 3, "tall": 2}
