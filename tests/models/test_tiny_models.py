from __future__ import annotations

from pathlib import Path

import pytest

from ot_gradio.models.tiny import TinyModelPaths, resolve_tiny
from ot_gradio.models.tiny.sd15 import save_tiny_sd15


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


TINY_NAMES = {
    "sd15", "sd15-inpainting", "sd2", "sd2-base", "sd2-inpainting", "sd2-depth", "sdxl", "sdxl-inpainting", "sd3", "sd35", "flux",
    "flux-fill", "chroma", "flux2-dev", "flux2-klein", "z-image", "qwen-image", "krea2", "anima", "sana", "pixart", "pixart-sigma",
    "wuerstchen2", "cascade", "wan", "wan22-5b", "hunyuan_video", "ltx2", "hidream", "ideogram4",
    "wan22-a14b", "wan22-i2v-a14b", "wan21-i2v", "ernie", "qwen-image-edit", "qwen-image-edit-plus",
}


def test_every_tiny_model_is_registered_from_the_tiny_package_alone():
    from ot_gradio.models.tiny import all_tiny_models

    assert set(all_tiny_models()) == {f"tiny:{name}" for name in TINY_NAMES}


def test_family_modules_hold_no_tiny_builders():
    import ast
    from pathlib import Path

    import ot_gradio.models

    for path in Path(ot_gradio.models.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        defs = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
        assert not [name for name in defs if name.startswith(("tiny_", "save_tiny"))], path.name


class _Pipe:
    def __init__(self, built):
        built.append(self)

    def save_pretrained(self, folder, safe_serialization):
        (Path(folder) / "model_index.json").write_text("{}")


def test_save_tiny_builds_once_and_completes_a_partial_cache(tmp_path):
    from ot_gradio.models.tiny import save_tiny

    built, singles = [], []

    def write_single(path, pipe):
        singles.append(pipe)
        path.write_bytes(b"single")

    paths = save_tiny(tmp_path, "one.safetensors", lambda: _Pipe(built), write_single)
    assert (paths.diffusers_dir / "model_index.json").is_file() and paths.single_file.read_bytes() == b"single"
    assert len(built) == 1 and singles == built
    assert save_tiny(tmp_path, "one.safetensors", lambda: _Pipe(built), write_single) == paths and len(built) == 1
    paths.single_file.unlink()  # a cache with the folder only: the file is written, the folder kept
    stamp = (paths.diffusers_dir / "model_index.json").stat().st_mtime_ns
    save_tiny(tmp_path, "one.safetensors", lambda: _Pipe(built), write_single)
    assert paths.single_file.is_file() and len(built) == 2
    assert (paths.diffusers_dir / "model_index.json").stat().st_mtime_ns == stamp
    folder_only = save_tiny(tmp_path / "b", "none", lambda: _Pipe(built))  # a family that loads only from folders
    assert (folder_only.diffusers_dir / "model_index.json").is_file() and not folder_only.single_file.exists()
