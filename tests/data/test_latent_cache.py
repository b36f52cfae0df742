import os

import pytest
import torch

from ot_gradio.data import DataError, LatentCache, cache_key
from ot_gradio.data.transform import CropBox

BASE = dict(
    path="/data/a.png",
    file_size=100,
    mtime_ns=1,
    bucket=(64, 64),
    crop=CropBox(0, 0, 64, 64),
    flip=False,
    resolution=(64, 64),
    vae_id="vae-1",
)


def test_key_changes_with_every_input():
    base = cache_key(**BASE)
    assert base == cache_key(**BASE) and len(base) == 64
    changes = dict(
        path="/data/b.png",
        file_size=101,
        mtime_ns=2,
        bucket=(56, 80),
        crop=CropBox(0, 8, 64, 72),
        flip=True,
        resolution=(128, 128),
        vae_id="vae-2",
    )
    keys = {cache_key(**{**BASE, name: value}) for name, value in changes.items()}
    assert len(keys) == len(changes) and base not in keys


def test_mtime_change_on_disk_gives_new_key(tmp_path):
    file = tmp_path / "a.png"
    file.write_bytes(b"x")
    st = file.stat()
    before = cache_key(file, st.st_size, st.st_mtime_ns, (64, 64), CropBox(0, 0, 64, 64), False, (64, 64), "v")
    os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    st = file.stat()
    after = cache_key(file, st.st_size, st.st_mtime_ns, (64, 64), CropBox(0, 0, 64, 64), False, (64, 64), "v")
    assert before != after


def test_put_get_roundtrip_counters_and_atomic(tmp_path):
    cache = LatentCache(tmp_path / "cache", "vae-1")
    key = cache.key("/x.png", 1, 1, (64, 64), CropBox(0, 0, 64, 64), False, (64, 64))
    assert cache.get(key) is None and not cache.has(key)
    latent = torch.randn(4, 8, 8, dtype=torch.float16)
    path = cache.put(key, latent)
    assert path.suffix == ".safetensors" and path.parent.name == key[:2]
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert torch.equal(cache.get(key), latent) and cache.has(key)
    assert (cache.hits, cache.misses, cache.encodes) == (2, 2, 1)
    assert torch.equal(LatentCache(tmp_path / "cache", "vae-1").load(key), latent)


def test_corrupt_file_is_a_miss(tmp_path):
    cache = LatentCache(tmp_path, "v")
    key = "ab" * 32
    cache.path_for(key).parent.mkdir(parents=True)
    cache.path_for(key).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    assert cache.get(key) is None and not cache.has(key)
    with pytest.raises(DataError):
        cache.load(key)


def test_clear_removes_only_cache_files(tmp_path):
    cache = LatentCache(tmp_path, "v")
    for i in range(3):
        cache.put(f"{i:02d}" * 32, torch.zeros(1))
    (tmp_path / "keep.txt").write_text("mine")
    (tmp_path / "00" / "notes.txt").write_text("mine")
    crashed = tmp_path / "01" / f".{'01' * 32}.safetensors.abc123.tmp"  # left by a crash mid-put
    crashed.write_bytes(b"half")
    legacy = tmp_path / "02" / ".tmp-abc.safetensors"  # an older version's temp file: removed, not counted
    legacy.write_bytes(b"half")
    assert cache.clear() == 3
    assert not crashed.exists() and not legacy.exists()
    assert (tmp_path / "keep.txt").exists() and (tmp_path / "00" / "notes.txt").exists()


def test_bad_key_rejected(tmp_path):
    with pytest.raises(ValueError):
        LatentCache(tmp_path, "v").path_for("../../etc/passwd")


def test_truncated_file_is_a_miss(tmp_path):
    cache = LatentCache(tmp_path, "v")
    key = "cd" * 32
    path = cache.put(key, torch.randn(4, 8, 8))
    path.write_bytes(path.read_bytes()[:-10])
    assert not cache.has(key) and cache.get(key) is None
