import errno

import pytest
import torch

from ot_gradio import fsutil
from ot_gradio.runner.rundir import EventWriter, RunDir, clean_workspace, create_run, remove_leftovers
from ot_gradio.training import backup as backup_module
from ot_gradio.training.backup import MARKER, STEPS, Counters, complete_backups, latest_backup, read_backup, write_backup


def test_backup_round_trip_and_marker(tmp_path):
    root = tmp_path / "run" / "backup"
    weights = {"unet.a": torch.randn(3, 4)}
    path = write_backup(root, weights, {"optimizer": {"x": 1}}, {"seed": 1}, Counters(epoch=2, epoch_step=3, global_step=7))
    assert (path / MARKER).exists()
    loaded = read_backup(path)
    assert torch.equal(loaded.trainable["unet.a"], weights["unet.a"])
    assert loaded.counters == Counters(2, 3, 7)
    assert loaded.state["optimizer"] == {"x": 1}
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp")]


def test_incomplete_backup_is_never_picked(tmp_path):
    root = tmp_path / "run" / "backup"
    good = write_backup(root, {"w": torch.ones(1)}, {}, {}, Counters(global_step=1))
    broken = root / "zzzz-step99"
    broken.mkdir()
    (broken / "trainable.safetensors").write_bytes(b"half")
    assert complete_backups(root) == [good]
    assert latest_backup([tmp_path / "run"]) == good


def test_rolling_backups_keep_newest(tmp_path):
    root = tmp_path / "backup"
    made = [write_backup(root, {"w": torch.ones(1) * i}, {}, {}, Counters(global_step=i), keep=2) for i in range(4)]
    assert complete_backups(root) == made[-2:]


def test_a_copied_workspace_resumes_from_the_newest_backup_whatever_the_copy_did_to_file_times(tmp_path):
    """cp -r, an upload to Drive or rsync without -t give every file the time of the copy, in the
    order copied: the oldest backup's marker can end up the newest file. The order is the marker's
    content, which a copy keeps; resume, rolling backups and find_backup all read it."""
    import os
    import shutil
    import time

    from ot_gradio.training.backup_prune import prune_backups
    from ot_gradio.training.backup_training import Training
    from ot_gradio.training.resume import find_backup

    out = str(tmp_path / "out.safetensors")
    made = [write_backup(tmp_path / "run" / "backup", {"w": torch.ones(1) * i}, {}, {"output_model_destination": out},
                         Counters(global_step=i), training="t") for i in range(3)]
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "run", copy / "run", copy_function=shutil.copyfile)  # times of the copy, not kept
    copied = sorted((copy / "run" / "backup").iterdir())
    assert [p.name for p in copied] == [p.name for p in made]
    for age, backup in zip((0, 50, 100), copied, strict=True):  # the oldest copied last: its files are the newest
        os.utime(backup / MARKER, (time.time() - age, time.time() - age))
    assert complete_backups(copy / "run" / "backup") == copied
    assert latest_backup([copy / "run"]) == copied[-1]
    assert find_backup([copy / "run"], out) == copied[-1]
    pruned = prune_backups([copy / "run"], copied[-1], 2, Training("t"))
    assert pruned.deleted == [copied[0]] and copied[1].is_dir()


def test_within_a_training_the_furthest_step_is_the_newest_whatever_the_times_say(tmp_path):
    """A backup from before markers held the time, copied (its file time now the newest), beside a
    later one of the same training; and a resume on a machine whose clock is behind: the step
    decides within a training. A time that is no number (NaN by hand) falls back to the file's."""
    import json
    import os
    import time

    from ot_gradio.training.backup_prune import prune_backups
    from ot_gradio.training.backup_training import Training
    from ot_gradio.training.resume import find_backup

    out = str(tmp_path / "out.safetensors")
    made = [write_backup(tmp_path / "run" / "backup", {"w": torch.ones(1) * i}, {}, {"output_model_destination": out},
                         Counters(global_step=i), training="t") for i in (5, 10, 15)]
    old, later, behind = made
    marker = json.loads((old / MARKER).read_text())
    del marker["written"]  # an older version's marker
    (old / MARKER).write_text(json.dumps(marker))
    os.utime(old / MARKER, (time.time() + 60, time.time() + 60))  # copied last
    for backup, written in ((later, time.time() - 3600), (behind, time.time() - 7200)):  # the other machine's clock behind
        (backup / MARKER).write_text(json.dumps({**json.loads((backup / MARKER).read_text()), "written": written}))
    assert latest_backup([tmp_path / "run"]) == behind and find_backup([tmp_path / "run"], out) == behind
    assert prune_backups([tmp_path / "run"], behind, 2, Training("t")).deleted == [old]
    (later / MARKER).write_text(json.dumps({**json.loads((later / MARKER).read_text()), "written": float("nan")}))
    assert backup_module.marker_time(later) == (later / MARKER).stat().st_mtime


# --- a full disk, and what crashed writes leave ------------------------------------------------

def _first(root):
    weights = {"unet.a": torch.randn(64, 64)}
    return write_backup(root, weights, {"optimizer": {"x": 1}}, {"seed": 1}, Counters(global_step=1)), weights


def _only_complete(root):
    return all((p / MARKER).exists() for p in root.iterdir())


def test_disk_full_inside_torch_save_keeps_the_previous_backup_and_leaves_nothing(tmp_path, monkeypatch):
    root = tmp_path / "backup"
    good, weights = _first(root)
    real_save = torch.save

    def torch_save_on_a_full_disk(obj, f):  # what torch does: part of the file, then a vague error
        real_save(obj, f)
        with open(f, "r+b") as fh:
            fh.truncate(100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 9536 vs 9424")

    monkeypatch.setattr(backup_module.torch, "save", torch_save_on_a_full_disk)
    free = iter([10 * 2**30, 1000, 1000, 1000])  # room at the start, then full
    monkeypatch.setattr(backup_module, "free_bytes", lambda p: next(free))
    monkeypatch.setattr(fsutil, "free_bytes", lambda p: 1000)
    with pytest.raises(fsutil.DiskFullError) as err:
        write_backup(root, {"unet.a": torch.zeros(64, 64)}, {}, {}, Counters(global_step=2))
    message = str(err.value)
    assert message.startswith(f"disk full: could not write a backup in {root} (about ")
    assert "needed, 1000 bytes free)" in message and message.endswith("the earlier backups are intact")
    assert err.value.needed >= 64 * 64 * 4
    assert sorted(p.name for p in root.iterdir()) == [good.name]  # no .tmp-, no half folder
    assert latest_backup([tmp_path]) == good  # resume still picks the earlier backup
    loaded = read_backup(good)
    assert torch.equal(loaded.trainable["unet.a"], weights["unet.a"]) and loaded.counters.global_step == 1


def test_a_backup_that_cannot_fit_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    root = tmp_path / "backup"
    good, _ = _first(root)
    monkeypatch.setattr(backup_module, "free_bytes", lambda p: 4096)
    with pytest.raises(fsutil.DiskFullError, match=r"about 1\.0 MB needed, 4\.0 KB free"):
        write_backup(root, {"w": torch.zeros(16)}, {}, {}, Counters(global_step=2))
    assert [p.name for p in root.iterdir()] == [good.name]


def test_disk_full_writing_the_marker_removes_the_unmarked_folder(tmp_path, monkeypatch):
    root = tmp_path / "backup"
    good, _ = _first(root)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(backup_module, "atomic_write_text", lambda *a, **k: full())
    with pytest.raises(OSError):
        write_backup(root, {"w": torch.zeros(16)}, {}, {}, Counters(global_step=2))
    assert [p.name for p in root.iterdir()] == [good.name] and _only_complete(root)
    assert complete_backups(root) == [good]


def test_every_step_of_a_backup_write_can_be_held(tmp_path, monkeypatch):
    flag = tmp_path / "where"
    monkeypatch.setenv("OT_GRADIO_FAULT_PAUSE_FILE", str(flag))
    for step in STEPS:
        monkeypatch.setenv("OT_GRADIO_FAULT_PAUSE", f"{step}:0")
        flag.unlink(missing_ok=True)
        write_backup(tmp_path / "backup", {"w": torch.zeros(2)}, {}, {}, Counters(global_step=1), keep=1)
        assert flag.read_text() == step


def _crashed_run(workspace):
    """A run folder as a SIGKILL leaves it: a complete backup, a half-assembled one, a renamed one
    without its marker, and atomic writes' temp files in save/ and samples/."""
    run = RunDir(workspace / "runs" / "20250101-000000-run-abcdef").make()
    run.config.write_text("{}")
    good = write_backup(run.backup, {"w": torch.ones(2)}, {}, {}, Counters(global_step=1))
    (run.backup / ".tmp-20250101-000001-step2").mkdir()
    (run.backup / ".tmp-20250101-000001-step2" / "state.pt").write_bytes(b"trunc")
    (run.backup / "20250101-000002-step3").mkdir()
    (run.backup / "20250101-000002-step3" / "trainable.safetensors").write_bytes(b"x")
    (run.save / ".lora-step3.safetensors.k2j3.tmp").write_bytes(b"half")
    (run.samples / ".step000003-epoch0-0.jpg.q1w2.tmp").write_bytes(b"half")
    (run.path / ".config.json.zz.tmp").write_bytes(b"{")
    return run, good


def test_leftovers_of_a_crashed_run_are_removed_at_the_next_start_never_a_complete_backup(tmp_path):
    run, good = _crashed_run(tmp_path / "ws")
    writer = EventWriter(run)  # the worker still runs: nothing of its run is touched
    assert remove_leftovers(run) == [] and len(list(run.backup.iterdir())) == 3
    writer.close()  # the worker is gone (a SIGKILL drops the lock just the same)
    new = create_run(tmp_path / "ws", {"seed": 1})
    assert sorted(p.name for p in run.backup.iterdir()) == [good.name]
    assert read_backup(good).counters.global_step == 1
    assert list(run.save.iterdir()) == [] and list(run.samples.iterdir()) == []
    assert sorted(p.name for p in run.path.iterdir() if p.name.startswith(".")) == []
    logged = new.log.read_text()
    assert logged.count("removed a leftover of an interrupted write") == 5
    assert ".tmp-20250101-000001-step2" in logged and "20250101-000002-step3" in logged
    assert clean_workspace(tmp_path / "ws") == []  # nothing left to do


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MB filesystem (tmpfs), where the box lets us mount one (root with CAP_SYS_ADMIN)."""
    import os
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the injected-ENOSPC tests cover the same paths")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)  # lazy: a file torch left open must not keep it


def test_a_real_full_disk_torch_save_safetensors_and_the_marker(small_disk):
    """No injection: torch.save and safetensors on a full tmpfs, in their own words."""
    from safetensors.torch import save_file

    root = small_disk / "backup"
    good = write_backup(root, {"w": torch.ones(1000)}, {}, {}, Counters(global_step=1))
    big_state = {"blob": b"\x01" * (3 * 2**20)}  # not a tensor: passes the size check, then fills the disk
    with pytest.raises(fsutil.DiskFullError, match=r"^disk full: could not write a backup in .*backup \(about .* needed, .* free\)"):
        write_backup(root, {"w": torch.ones(1000)}, big_state, {}, Counters(global_step=2))
    assert [p.name for p in root.iterdir()] == [good.name] and read_backup(good).counters.global_step == 1

    target = small_disk / "lora.safetensors"
    with pytest.raises(fsutil.DiskFullError, match=r"^disk full: could not write the file .*lora.safetensors \(.* free\)"):
        fsutil.atomic_write(target, lambda tmp: save_file({"w": torch.ones(2**20)}, str(tmp)))  # 4 MB
    assert not target.exists() and sorted(p.name for p in small_disk.iterdir()) == ["backup"]


class _RunsCode:
    def __reduce__(self):  # what a planted state.pt does: call anything when unpickled
        import pathlib  # noqa: PLC0415

        return (pathlib.Path.touch, (pathlib.Path(_RunsCode.flag),))


def test_a_state_file_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    root = tmp_path / "run" / "backup"
    path = write_backup(root, {"w": torch.ones(1)}, {"optimizer": {"x": 1}}, {}, Counters(global_step=1))
    assert read_backup(path).state["rng"]["numpy"][0] == "MT19937"  # our own file, numpy state and all, loads
    _RunsCode.flag = str(tmp_path / "ran")
    torch.save({"counters": Counters().as_dict(), "payload": _RunsCode()}, path / "state.pt")
    with pytest.raises(ValueError, match=r"state\.pt holds objects other than tensors.*not loaded"):
        read_backup(path)
    assert not (tmp_path / "ran").exists()


def test_a_resumed_run_compares_the_concepts_folders_with_their_captions_files():
    """A backup's concepts and this run's are compared by folder and Captions file (which decides the
    images that train), so a changed Captions file is said when a run continues."""
    from ot_gradio.training.resume import _concept_folders

    before = {"concepts": [{"path": "/d/a", "text": {"captions_file": "/d/meta_cap.json"}}, {"path": "/d/b", "enabled": False}]}
    assert _concept_folders(before) == ["/d/a (Captions file /d/meta_cap.json)"]
    assert _concept_folders({"concepts": [{"path": "/d/a", "text": {}}]}) != _concept_folders(before)
