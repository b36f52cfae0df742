"""Backups with their COMPLETE marker whose files are damaged (an interrupted copy to or from Drive
copies the marker first; a bad disk): left out of the complete backups, named with what is wrong,
never deleted; and rolling backups across the runs of one training."""

import os
import time
import zipfile

import pytest
import torch

from ot_gradio.training.backup import (
    MARKER,
    Counters,
    UnreadableBackup,
    backup_problem,
    complete_backups,
    damaged_backups,
    latest_backup,
    prune_backups,
    read_backup,
    write_backup,
)


def _two(tmp_path):
    root = tmp_path / "run" / "backup"
    older = write_backup(root, {"w": torch.ones(256)}, {"optimizer": {"x": 1}}, {"seed": 1}, Counters(global_step=1))
    newer = write_backup(root, {"w": torch.full((256,), 2.0)}, {"optimizer": {"x": 2}}, {"seed": 1}, Counters(global_step=2))
    os.utime(older / MARKER, (time.time() - 60, time.time() - 60))
    return root, older, newer


def _cut(file):
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


DAMAGE = {
    "trainable cut off": (lambda b: _cut(b / "trainable.safetensors"), "trainable.safetensors is cut off"),
    "trainable missing": (lambda b: (b / "trainable.safetensors").unlink(), "trainable.safetensors is missing"),
    "state cut off": (lambda b: _cut(b / "state.pt"), "state.pt is cut off or damaged"),
    "state empty": (lambda b: (b / "state.pt").write_bytes(b""), "state.pt is empty"),
    "state missing": (lambda b: (b / "state.pt").unlink(), "state.pt is missing"),
    "config missing": (lambda b: (b / "config.json").unlink(), "config.json is missing"),
    "config cut off": (lambda b: (b / "config.json").write_text('{"seed": '), "config.json cannot be read"),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_marked_backup_with_a_damaged_file_is_left_out_named_and_kept(kind, tmp_path):
    root, older, newer = _two(tmp_path)
    damage, said = DAMAGE[kind]
    damage(newer)
    assert complete_backups(root) == [older]
    assert latest_backup([tmp_path / "run"]) == older  # the resume takes the older one
    [(found, why)] = damaged_backups([tmp_path / "run"])
    assert found == newer and said in why
    with pytest.raises(UnreadableBackup, match=rf"backup {newer} cannot be read: {said}.*move it out of the workspace or delete it"):
        read_backup(newer)
    assert newer.is_dir()  # never deleted: the user decides
    assert read_backup(older).counters.global_step == 1


def test_a_file_damaged_inside_is_found_by_loading_and_left_out_from_then_on(tmp_path):
    """The quick look reads headers only; a state.pt whose data is damaged inside (same size, the
    zip directory intact) fails to load, and read_backup records it so the resume moves past it."""
    root, older, newer = _two(tmp_path)
    state = newer / "state.pt"
    with zipfile.ZipFile(state) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("data.pkl"))
    data = bytearray(state.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start:start + info.compress_size] = b"\x00" * info.compress_size
    state.write_bytes(bytes(data))
    assert backup_problem(newer) is None and complete_backups(root) == [older, newer]
    with pytest.raises(UnreadableBackup, match=rf"backup {newer} cannot be read: state.pt is damaged \(Unsupported operand 0\)"):
        read_backup(newer)
    assert complete_backups(root) == [older]
    assert "state.pt is damaged" in damaged_backups([tmp_path / "run"])[0][1]
    (newer / "state.pt").write_bytes(bytes(data))  # a file changed since is looked at again
    assert backup_problem(newer) is None


def _backup(run, output, step, age):
    path = write_backup(run / "backup", {"w": torch.full((4,), float(step))}, {}, {"output_model_destination": str(output)},
                        Counters(global_step=step))
    os.utime(path / MARKER, (time.time() - age, time.time() - age))
    return path


def test_rolling_backups_count_the_whole_training_across_its_runs_and_nothing_else(tmp_path):
    out, other = tmp_path / "out" / "lora.safetensors", tmp_path / "out" / "other.safetensors"
    a, b, c, x = (tmp_path / "ws" / "runs" / n for n in "abcx")
    ours = [_backup(a, out, 1, 50), _backup(a, out, 2, 40), _backup(b, out, 3, 30), _backup(b, out, 4, 20)]
    theirs = [_backup(x, other, 9, 45), _backup(x, other, 10, 5)]  # another training in the workspace
    numbered = _backup(x, tmp_path / "out" / "lora-2.safetensors", 7, 60)  # a separate start, given a numbered name
    damaged = _backup(a, out, 0, 70)
    (damaged / "state.pt").write_bytes(b"")
    newest = _backup(c, out, 5, 0)
    deleted = prune_backups([a, b, c, x], newest, 2, str(out))
    assert sorted(deleted) == sorted(ours[:3])
    assert [p for p in ours + theirs + [numbered, damaged, newest] if p.is_dir()] == [ours[3], *theirs, numbered, damaged, newest]
    # the one just written stays whatever its marker's time says (a clock set back, a copied workspace)
    os.utime(newest / MARKER, (time.time() - 1000, time.time() - 1000))
    assert prune_backups([a, b, c, x], newest, 1, str(out)) == [ours[3]] and newest.is_dir()

