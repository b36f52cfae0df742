from __future__ import annotations

import pytest

from ot_gradio.models.tiny import TinyModelPaths, resolve_tiny, save_tiny_sd15


def test_save_is_cached(tmp_path):
    first = save_tiny_sd15(tmp_path)
    assert isinstance(first, TinyModelPaths)
    assert (first.diffusers_dir / "model_index.json").is_file() and first.single_file.is_file()
    stamp = first.single_file.stat().st_mtime_ns
    assert save_tiny_sd15(tmp_path) == first
    assert first.single_file.stat().st_mtime_ns == stamp


def test_resolve_uses_the_env_folder(tiny_dir, tiny_sd15_paths):
    assert tiny_sd15_paths.diffusers_dir.is_relative_to(tiny_dir)
    assert resolve_tiny("tiny:sd15") == tiny_sd15_paths


def test_unknown_tiny_model():
    with pytest.raises(ValueError, match="tiny:sd15"):
        resolve_tiny("tiny:nope")
