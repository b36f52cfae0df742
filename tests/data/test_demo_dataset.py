import pickle

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
