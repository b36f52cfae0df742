"""Uploads are bounded: the page keeps at most a total of them (the oldest go first, never the one
arriving) and gradio's delete_cache removes those older than a day."""

import socket
from pathlib import Path

import gradio as gr
import httpx
import pytest

from ot_gradio.ui.uploads import DELETE_CACHE, CappedUploads, bound_uploads

MB = 1024 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_many_uploads_keep_at_most_the_cap_newest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    with gr.Blocks() as demo:
        gr.File()
    bound_uploads(demo, cap=2 * MB)
    port = _free_port()
    demo.launch(prevent_thread_lock=True, quiet=True, server_port=port)
    try:
        paths = []
        with httpx.Client(timeout=60) as client:
            for i in range(40):  # 40 x 0.3 MB = 12 MB sent, each upload different
                data = bytes([i]) * (3 * MB // 10)
                resp = client.post(f"http://127.0.0.1:{port}/gradio_api/upload", files=[("files", (f"u{i}.bin", data))])
                assert resp.status_code == 200, resp.text
                paths += resp.json()
        kept = [p for p in paths if Path(p).exists()]
        total = sum(Path(p).stat().st_size for p in kept)
        assert total <= 2 * MB + 3 * MB // 10, total
        assert paths[-1] in kept and paths[0] not in kept  # the newest stays, the oldest went
        assert set(kept) == set(demo.upload_file_set)
    finally:
        demo.close()


def test_the_page_bounds_its_uploads(tmp_path):
    from ot_gradio.ui.page import Page

    page = Page(tmp_path / "workspace")
    try:
        assert isinstance(page.blocks.upload_file_set, CappedUploads)
        assert page.blocks.upload_file_set in page.blocks.temp_file_sets
        assert page.blocks.delete_cache == DELETE_CACHE
        # an imported config of 400,000 concepts (it took 273 s and 5.3 GB, then its autosave kept
        # the app from starting) is refused at once, naming the field and the limit
        import json
        import time

        bomb = tmp_path / "bomb.json"
        bomb.write_text(json.dumps({"config_version": 1, "concepts": [{"path": "x"}] * 400_000}))
        started = time.monotonic()
        with pytest.raises(gr.Error, match=r"concepts: 400000 items; at most 5000 are supported"):
            page.read_any(bomb)
        assert time.monotonic() - started < 10
        assert not (page.workspace / "ui-config.json").exists() or (page.workspace / "ui-config.json").stat().st_size < MB
    finally:
        page.tensorboard.stop()
