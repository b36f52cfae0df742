import json
import os
import stat
from pathlib import Path

import pytest

from ot_gradio import fsutil
from ot_gradio.fsutil import atomic_write, atomic_write_bytes, atomic_write_dir, atomic_write_json, atomic_write_text, fsync_dir


def names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_write_leaves_only_the_file_and_makes_parents(tmp_path):
    target = tmp_path / "a" / "b" / "out.bin"
    assert atomic_write(target, lambda tmp: tmp.write_bytes(b"data")) == target
    assert target.read_bytes() == b"data"
    assert names(target.parent) == ["out.bin"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_write_gets_a_hidden_temp_file_next_to_the_target(tmp_path):
    seen = []
    atomic_write(tmp_path / "out.txt", lambda tmp: (seen.append(tmp), tmp.write_text("x")))
    assert seen[0].parent == tmp_path
    assert seen[0].name.startswith(".out.txt.") and seen[0].name.endswith(".tmp")


def test_failing_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old")

    def crash(tmp):
        tmp.write_text("half a fi")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, crash)
    assert target.read_text() == "old"
    assert names(tmp_path) == ["out.txt"]


def test_failing_rename_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old")

    def boom(*args, **kwargs):
        raise OSError("cannot rename")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="cannot rename"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert names(tmp_path) == ["out.txt"]


def test_interrupt_also_cleans_up(tmp_path):
    def interrupted(tmp):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "out.txt", interrupted)
    assert names(tmp_path) == []


def test_bytes_text_and_json_round_trip(tmp_path):
    assert atomic_write_bytes(tmp_path / "b", b"\x00\xffbytes").read_bytes() == b"\x00\xffbytes"
    assert atomic_write_text(tmp_path / "t", "héllo\n").read_text(encoding="utf-8") == "héllo\n"
    assert (atomic_write_text(tmp_path / "l", "héllo", encoding="latin-1").read_bytes()) == "héllo".encode("latin-1")
    data = {"a": [1, 2.5, None, True], "b": {"c": "ünïcode"}}
    path = atomic_write_json(tmp_path / "j.json", data, indent=2, ensure_ascii=False)
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == data
    assert text.endswith("}\n") and "ünïcode" in text and '\n  "a"' in text
    assert names(tmp_path) == ["b", "j.json", "l", "t"]


def test_overwrite_replaces_the_content(tmp_path):
    target = tmp_path / "out.json"
    atomic_write_json(target, {"v": 1})
    atomic_write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 2}
    assert names(tmp_path) == ["out.json"]


def test_json_that_cannot_be_encoded_leaves_nothing(tmp_path):
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "out.json", {"x": object()})
    assert names(tmp_path) == []


def test_fsync_dir_tolerates_folders_that_cannot_be_synced(tmp_path, monkeypatch):
    fsync_dir(tmp_path)
    fsync_dir(tmp_path / "missing")  # cannot even be opened

    def refuse(fd):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(fsutil.os, "fsync", refuse)
    fsync_dir(tmp_path)  # fsync refused: nothing raised


def test_atomic_write_dir_creates_and_replaces_a_folder(tmp_path):
    target = tmp_path / "model"

    def write_v1(tmp):
        (tmp / "old.txt").write_text("v1")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "w.bin").write_bytes(b"1")

    atomic_write_dir(target, write_v1)
    assert (target / "old.txt").read_text() == "v1" and (target / "sub" / "w.bin").read_bytes() == b"1"

    atomic_write_dir(target, lambda tmp: (tmp / "new.txt").write_text("v2"))
    assert names(target) == ["new.txt"]
    assert (target / "new.txt").read_text() == "v2"
    assert names(tmp_path) == ["model"]


def test_atomic_write_dir_restores_the_old_folder_when_write_fails(tmp_path):
    target = tmp_path / "model"
    atomic_write_dir(target, lambda tmp: (tmp / "keep.txt").write_text("v1"))

    def crash(tmp):
        (tmp / "half.txt").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write_dir(target, crash)
    assert names(target) == ["keep.txt"] and (target / "keep.txt").read_text() == "v1"
    assert names(tmp_path) == ["model"]


def test_atomic_write_dir_puts_the_old_folder_back_when_the_swap_fails(tmp_path, monkeypatch):
    target = tmp_path / "model"
    atomic_write_dir(target, lambda tmp: (tmp / "keep.txt").write_text("v1"))
    real_replace = os.replace

    def replace(src, dst):
        if str(src).endswith(".tmp"):  # the new folder cannot be moved into place
            raise OSError("cannot rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="cannot rename"):
        atomic_write_dir(target, lambda tmp: (tmp / "new.txt").write_text("v2"))
    assert names(target) == ["keep.txt"] and (target / "keep.txt").read_text() == "v1"
    assert names(tmp_path) == ["model"]


def test_importing_fsutil_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, ot_gradio.fsutil, ot_gradio.config.io, ot_gradio.runner.rundir; print('torch' in sys.modules)"
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"
