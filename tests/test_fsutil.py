import errno
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


# --- a full disk -------------------------------------------------------------------------------

def _fill_then_fail(exc, keep=b"half a fi"):
    def write(tmp):
        tmp.write_bytes(keep)  # part of the file is written...
        raise exc  # ...then the disk is full

    return write


def test_enospc_becomes_a_disk_full_error_naming_path_free_and_needed(tmp_path):
    target = tmp_path / "out.bin"
    atomic_write_bytes(target, b"old")
    with pytest.raises(fsutil.DiskFullError) as err:
        atomic_write(target, _fill_then_fail(OSError(errno.ENOSPC, "No space left on device")), needed=5000, what="the LoRA")
    message = str(err.value)
    assert message.startswith("disk full: could not write the LoRA ") and str(target) in message
    assert "about 4.9 KB needed" in message and " free)" in message and "\n" not in message
    assert err.value.errno == errno.ENOSPC and err.value.needed == 5000 and err.value.free is not None
    assert isinstance(err.value, OSError) and err.value.expected
    assert target.read_bytes() == b"old" and names(tmp_path) == ["out.bin"]  # old file kept, no temp left


@pytest.mark.parametrize("exc", [
    RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 9536 vs 9424"),  # torch.save
    RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"),
])
def test_torchs_vague_write_failure_is_a_full_disk_only_when_space_is_low(tmp_path, monkeypatch, exc):
    target = tmp_path / "state.pt"
    monkeypatch.setattr(fsutil, "free_bytes", lambda path: 1000)
    with pytest.raises(fsutil.DiskFullError, match=r"more than 9 bytes needed, 1000 bytes free"):
        atomic_write(target, _fill_then_fail(exc))
    assert names(tmp_path) == []
    monkeypatch.setattr(fsutil, "free_bytes", lambda path: 10 * 2**30)  # plenty of space: another failure
    with pytest.raises(RuntimeError) as err:
        atomic_write(target, _fill_then_fail(exc))
    assert not isinstance(err.value, OSError) and names(tmp_path) == []


def test_a_librarys_own_words_for_enospc_are_a_full_disk(tmp_path):
    from safetensors import SafetensorError

    exc = SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')
    with pytest.raises(fsutil.DiskFullError):
        atomic_write(tmp_path / "w.safetensors", _fill_then_fail(exc))
    with pytest.raises(ValueError, match="not a disk problem"):  # other errors pass unchanged
        atomic_write(tmp_path / "w.safetensors", _fill_then_fail(ValueError("not a disk problem")))
    assert names(tmp_path) == []


def test_disk_full_in_bytes_dir_and_cache_writers(tmp_path, monkeypatch):
    real_fdopen = os.fdopen

    class FullFile:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            self.fh.write(data[:3])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsutil.os, "fdopen", lambda fd, mode: FullFile(real_fdopen(fd, mode)))
    with pytest.raises(fsutil.DiskFullError, match="about 10 bytes needed"):
        fsutil.replace_write_bytes(tmp_path / "cache" / "k.safetensors", b"0123456789")
    assert names(tmp_path / "cache") == []
    monkeypatch.undo()

    model = tmp_path / "model"
    atomic_write_dir(model, lambda tmp: (tmp / "keep.txt").write_text("v1"))

    def fill(tmp):
        (tmp / "big.bin").write_bytes(b"x" * 100)
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    with pytest.raises(fsutil.DiskFullError, match=r"more than 100 bytes needed"):
        atomic_write_dir(model, fill)
    assert names(model) == ["keep.txt"] and names(tmp_path) == ["cache", "model"]


def test_disk_full_error_survives_pickling():
    import pickle

    err = fsutil.DiskFullError("/x/backup", 10, 2048, "a backup in", hint="; the earlier backups are intact")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is fsutil.DiskFullError and str(again) == str(err) and again.needed == 2048


def test_human_bytes():
    assert [fsutil.human_bytes(n) for n in (0, 1023, 1024, 5 * 2**20 + 1, 3 * 2**40)] == [
        "0 bytes", "1023 bytes", "1.0 KB", "5.0 MB", "3.0 TB"]


def test_a_write_removes_what_dead_writes_left_in_its_folder(tmp_path, monkeypatch):
    """A run killed in its final save left `.out.safetensors.<random>.tmp`: the next save into that
    folder removes it (and a dead folder swap's `.old`), but not a temp file another process is
    writing right now, nor anything that is not ours."""
    import time

    monkeypatch.setattr(fsutil, "_swept", {}, raising=False)
    models = tmp_path / "models"
    models.mkdir()
    stale_file = models / ".out.safetensors.a1b2c3d4.tmp"
    stale_file.write_bytes(b"x" * 100)
    stale_dir = models / ".lora-folder.zz9_zz9z.old"
    (stale_dir / "sub").mkdir(parents=True)
    (stale_dir / "sub" / "w.bin").write_bytes(b"x")
    fresh = models / ".other.safetensors.q1w2e3r4.tmp"
    fresh.write_bytes(b"y")
    mine_not = models / ".notes.tmp"
    mine_not.write_text("user's")
    old = time.time() - 2 * fsutil.STALE_TEMP_SECONDS
    for p in (stale_file, stale_dir, stale_dir / "sub", stale_dir / "sub" / "w.bin", mine_not):
        os.utime(p, (old, old))
    atomic_write_bytes(models / "out.safetensors", b"new")
    assert names(models) == sorted([".other.safetensors.q1w2e3r4.tmp", ".notes.tmp", "out.safetensors"])


def test_the_backup_marker_is_declared_once_below_the_trainer_and_the_runner():
    import ast

    package = Path(fsutil.__file__).parent
    declared, runner_imports = [], []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared += [path.name for node in ast.walk(tree) if isinstance(node, ast.Assign)
                     for target in node.targets if isinstance(target, ast.Name) and target.id == "BACKUP_MARKER"]
        if path.parent.name == "training":
            runner_imports += [path.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                               and "runner" in (node.module or "")]
    assert declared == ["fsutil.py"] and runner_imports == []
