"""A model's first load says what it downloads (models/download_watch.py)."""

import os
import threading

from ot_gradio.models.download_watch import DownloadWatch, cache_bytes


def test_the_cache_is_measured_once_per_file_and_growth_is_reported_while_it_happens(tmp_path):
    cache = tmp_path / "hub"
    blobs = cache / "models--a--b" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "old").write_bytes(b"x" * 1000)  # downloaded by an earlier run
    snapshot = cache / "models--a--b" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    os.symlink(blobs / "old", snapshot / "model.safetensors")  # the hub's snapshot entry: not counted again
    assert cache_bytes(cache) == 1000 and cache_bytes(tmp_path / "missing") == 0

    said, ticks = [], []
    tick = threading.Event()

    def report(message, detail):
        said.append((message, detail))
        ticks.append(1)
        tick.set()

    with DownloadWatch(report, "a/b", cache, every=0.05):
        (blobs / "new.incomplete").write_bytes(b"y" * 3 * 1024 * 1024)  # a download under way
        assert tick.wait(10)
    message, detail = said[0]
    assert message == f"loading a/b: {detail}" and detail.startswith("3.0 MB downloaded, ") and detail.endswith("/s")
    assert said[-1][0].startswith("loading a/b: downloaded 3.0 MB in ") and said[-1][1] == ""  # over: the bar drops it


def test_a_load_that_downloads_nothing_says_nothing(tmp_path):
    (tmp_path / "f").write_bytes(b"1")
    said = []
    with DownloadWatch(lambda *args: said.append(args), "local", tmp_path, every=0.01):
        threading.Event().wait(0.1)
    assert said == []
