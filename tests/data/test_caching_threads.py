"""The caching phase with `threads` > 0: images decoded in threads, latents written by a writer
thread. Same files, same bytes, same encode order as with 0 threads; errors stop the phase."""

import threading
from pathlib import Path

import pytest
import torch

from ot_gradio.data import DataError, build_dataset, caching
from ot_gradio.data.latent_cache import LatentCache


def _files(cache: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cache.rglob("*.safetensors"))}


class RandomEncoder:
    """Draws from one generator, like the real VAE's sampled latents: the stored latents depend on
    the order of the encode calls."""

    def __init__(self):
        self.rng = torch.Generator().manual_seed(3)
        self.threads: set[str] = set()

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        self.threads.add(threading.current_thread().name)
        b, _, h, w = pixels.shape
        return pixels[:, :, ::8, ::8].mean(1, keepdim=True).repeat(1, 4, 1, 1) + torch.randn(b, 4, h // 8, w // 8, generator=self.rng)


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_store_the_same_bytes_as_none(tmp_path, simple_folder, make_concept, threads):
    concept = make_concept(simple_folder, image={"enable_random_flip": True})
    stored = {}
    for n in (0, threads):
        encoder = RandomEncoder()
        dataset = build_dataset([concept], "64,128", 2, latent_caching=True, cache_dir=tmp_path / f"c{n}", vae_id="v",
                                encode_fn=encoder, encode_batch_size=3, threads=n)
        assert dataset.cache_report.encoded == dataset.cache_report.total == 24
        assert encoder.threads == {threading.current_thread().name}  # the model runs in the caller's thread only
        stored[n] = _files(tmp_path / f"c{n}" / "latents")
    assert len(stored[0]) == 24 and stored[threads] == stored[0]


def test_reading_and_writing_happen_in_other_threads(tmp_path, simple_folder, make_concept, encoder, monkeypatch):
    seen = {"render": set(), "put": set()}
    render, put = caching.render_pixels, LatentCache.put

    def spy_render(item, variant):
        seen["render"].add(threading.current_thread().name)
        return render(item, variant)

    def spy_put(self, key, tensor):
        seen["put"].add(threading.current_thread().name)
        return put(self, key, tensor)

    monkeypatch.setattr(caching, "render_pixels", spy_render)
    monkeypatch.setattr(LatentCache, "put", spy_put)
    build_dataset([make_concept(simple_folder)], "64", 2, latent_caching=True, cache_dir=tmp_path / "c", vae_id="v",
                  encode_fn=encoder, encode_batch_size=1, threads=2)
    here = threading.current_thread().name
    assert seen["render"] and here not in seen["render"] and all(n.startswith("ot-data") for n in seen["render"])
    assert seen["put"] and all(n.startswith("ot-cache-write") for n in seen["put"])


def test_a_failed_write_stops_caching_with_its_error(tmp_path, simple_folder, make_concept, encoder, monkeypatch):
    put = LatentCache.put
    calls = []

    def failing_put(self, key, tensor):
        calls.append(key)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return put(self, key, tensor)

    monkeypatch.setattr(LatentCache, "put", failing_put)
    with pytest.raises(OSError, match="No space left"):
        build_dataset([make_concept(simple_folder)], "64", 2, latent_caching=True, cache_dir=tmp_path / "c", vae_id="v",
                      encode_fn=encoder, encode_batch_size=1, threads=2)
    assert encoder.images < 6 + caching._WRITES_AHEAD + 1  # it stopped, not encoded everything first
    folder = tmp_path / "c" / "latents"
    written = _files(folder)
    assert 1 <= len(written) < 6  # writes already started may finish; each file is whole, none half-written
    cache = LatentCache(folder, "v")
    assert all(cache.load(Path(name).stem).shape[0] == 4 for name in written)
    assert not [p for p in folder.rglob("*") if p.is_file() and p.suffix != ".safetensors"]


def test_an_image_gone_in_a_reading_thread_names_the_file(tmp_path, simple_folder, make_concept, encoder, monkeypatch):
    render = caching.render_pixels

    def vanish(item, variant):
        if Path(item.path).name == "img3.png":
            Path(item.path).unlink(missing_ok=True)
        return render(item, variant)

    monkeypatch.setattr(caching, "render_pixels", vanish)
    with pytest.raises(DataError, match="img3.png could not be read"):
        build_dataset([make_concept(simple_folder)], "64", 2, latent_caching=True, cache_dir=tmp_path / "c", vae_id="v",
                      encode_fn=encoder, encode_batch_size=1, threads=2)
