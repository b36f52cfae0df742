"""Backups with their COMPLETE marker whose files are damaged (an interrupted copy to or from Drive
copies the marker first; a bad disk): left out of the complete backups, named with what is wrong,
never deleted; which damaged ones stop a continued run; and rolling backups across the runs of one
training, by its id, never another training's that saves to the same file."""

import json
import os
import shutil
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ot_gradio.training.backup import MARKER, Counters, complete_backups, damaged_backups, latest_backup, read_backup, write_backup
from ot_gradio.training.backup_damage import UnreadableBackup, backup_problem
from ot_gradio.training.backup_prune import prune_backups
from ot_gradio.training.backup_training import Training, continue_training, run_training
from ot_gradio.training.preflight import TrainingError
from ot_gradio.training.resume_damaged import resume_past_damaged
from ot_gradio.training.run_state import Reporter, RunPaths


def _age(backup, seconds):
    """Date a backup `seconds` back: the time its marker holds, and the marker file's own."""
    marker = json.loads((backup / MARKER).read_text())
    (backup / MARKER).write_text(json.dumps({**marker, "written": time.time() - seconds}))
    os.utime(backup / MARKER, (time.time() - seconds, time.time() - seconds))


def _two(tmp_path):
    root = tmp_path / "run" / "backup"
    older = write_backup(root, {"w": torch.ones(256)}, {"optimizer": {"x": 1}}, {"seed": 1}, Counters(global_step=1))
    newer = write_backup(root, {"w": torch.full((256,), 2.0)}, {"optimizer": {"x": 2}}, {"seed": 1}, Counters(global_step=2))
    _age(older, 60)
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


def _backup(run, output, step, age, training=""):
    path = write_backup(run / "backup", {"w": torch.full((4,), float(step))}, {}, {"output_model_destination": str(output)},
                        Counters(global_step=step), training=training)
    _age(path, age)
    return path


def _alive(*backups):
    return [b for b in backups if b.is_dir()]


def test_rolling_backups_count_the_whole_training_across_its_runs_and_nothing_else(tmp_path):
    out, other = tmp_path / "out" / "lora.safetensors", tmp_path / "out" / "other.safetensors"
    a, b, c, x = (tmp_path / "ws" / "runs" / n for n in "abcx")
    ours = [_backup(a, out, 1, 50, "t1"), _backup(a, out, 2, 40, "t1"), _backup(b, out, 3, 30, "t1"), _backup(b, out, 4, 20, "t1")]
    theirs = [_backup(x, other, 9, 45, "t2"), _backup(x, other, 10, 5, "t2")]  # another training in the workspace
    numbered = _backup(x, tmp_path / "out" / "lora-2.safetensors", 7, 60, "t3")  # a separate start, given a numbered name
    damaged = _backup(a, out, 0, 70, "t1")
    (damaged / "state.pt").write_bytes(b"")
    newest = _backup(c, out, 5, 0, "t1")
    pruned = prune_backups([a, b, c, x], newest, 2, Training("t1"))
    assert sorted(pruned.deleted) == sorted(ours[:3]) and pruned.failed == []
    assert _alive(*ours, *theirs, numbered, damaged, newest) == [ours[3], *theirs, numbered, damaged, newest]
    # the one just written stays whatever its marker's time says (a clock set back, a copied workspace)
    _age(newest, 1000)
    assert prune_backups([a, b, c, x], newest, 1, Training("t1")).deleted == [ours[3]] and newest.is_dir()


def test_a_fresh_run_that_kept_a_failed_runs_output_name_never_deletes_its_backups(tmp_path):
    """Run A wrote backups 1-5 and failed before writing its model, so runner/outputs.py gives the
    fresh run B the same output name: B's rolling backups are B's only."""
    out = tmp_path / "out" / "x.safetensors"
    a, b = tmp_path / "ws" / "runs" / "a", tmp_path / "ws" / "runs" / "b"
    theirs = [_backup(a, out, step, 100 - step, "run-a") for step in range(1, 6)]
    mine = [_backup(b, out, step, 50 - step, "run-b") for step in range(1, 4)]
    pruned = prune_backups([a, b], mine[-1], 2, Training("run-b"))
    assert pruned.deleted == [mine[0]] and _alive(*theirs) == theirs


def test_backups_from_before_training_ids_are_pruned_in_this_run_and_its_continued_backup_only(tmp_path):
    out = tmp_path / "out" / "x.safetensors"
    a, b, c = (tmp_path / "ws" / "runs" / n for n in "abc")
    older = _backup(a, out, 1, 90)  # no id in the marker: written before this change
    continued = _backup(a, out, 2, 80)
    elsewhere = _backup(c, out, 3, 70)  # same file, no id, not in this chain as far as can be told
    unreadable = _backup(c, out, 4, 60, "t")
    (unreadable / MARKER).write_text("{not json")
    own_old = _backup(b, out, 5, 50)
    mine = [_backup(b, out, 6, 40, "t"), _backup(b, out, 7, 30, "t")]
    pruned = prune_backups([a, b, c], mine[-1], 1, Training("t", continued.resolve()))
    assert sorted(pruned.deleted) == sorted([continued, own_old, mine[0]])
    assert _alive(older, elsewhere, unreadable, mine[1]) == [older, elsewhere, unreadable, mine[1]]


def test_a_backup_that_cannot_be_deleted_is_reported_not_said_deleted(tmp_path, monkeypatch):
    out = tmp_path / "out" / "x.safetensors"
    run = tmp_path / "ws" / "runs" / "a"
    stuck, gone, newest = _backup(run, out, 1, 30, "t"), _backup(run, out, 2, 20, "t"), _backup(run, out, 3, 10, "t")
    real = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if Path(path) == stuck:
            raise PermissionError(13, "Permission denied", str(stuck / "state.pt"))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    pruned = prune_backups([run], newest, 1, Training("t"))
    assert pruned.deleted == [gone]
    [(folder, why)] = pruned.failed
    assert folder == stuck and "Permission denied" in why and str(stuck / "state.pt") in why
    assert stuck not in complete_backups(run / "backup")  # half deleted: no backup any more, the next run removes it


def _paths(run):
    return RunPaths(run / "samples", run / "backup", run / "save", None, [], run=run)


def test_a_run_keeps_its_training_and_a_continued_run_carries_the_backups_on(tmp_path):
    out = tmp_path / "out" / "x.safetensors"
    a, b, c = (tmp_path / "ws" / "runs" / n for n in "abc")
    fresh = run_training(_paths(a))
    assert fresh.continued_from is None and run_training(_paths(a)) == fresh  # every backup of the run: one id
    assert run_training(_paths(b)).id != fresh.id  # another fresh run: another training
    backup = _backup(a, out, 1, 0, fresh.id)
    assert continue_training(_paths(c), backup) == Training(fresh.id, backup.resolve()) == run_training(_paths(c))
    old = _backup(a, out, 2, 0)  # written before ids: the continued run starts a new id, and counts this backup
    carried = continue_training(_paths(c), old)
    assert carried.id not in ("", fresh.id) and carried.continued_from == old.resolve()
    assert json.loads((c / "training.json").read_text())["continued_from"] == str(old.resolve())


class Said(Reporter):
    def __init__(self):
        self.warnings = []

    def warning(self, message):
        self.warnings.append(message)


def _continuing(run, others, out):
    said = Said()
    state = SimpleNamespace(paths=RunPaths(run / "s", run / "backup", run / "o", None, others, run=run),
                            config=SimpleNamespace(output_model_destination=str(out)), report=said,
                            dist=SimpleNamespace(is_main=True))
    return (lambda: state), said


def test_a_damaged_backup_that_does_not_say_whose_it_is_never_stops_another_training(tmp_path):
    """Another training's half-copied backup (config.json not there yet) in the workspace: a run
    with Continue on and no backup of its own is told about it and starts anew."""
    out = tmp_path / "out" / "x.safetensors"
    theirs = _backup(tmp_path / "ws" / "other", tmp_path / "out" / "y.safetensors", 3, 0, "them")
    (theirs / "config.json").unlink()
    state, said = _continuing(tmp_path / "ws" / "mine", [tmp_path / "ws" / "other"], out)
    assert resume_past_damaged(state) is None
    assert any("the backup other/" in w and "does not say which training it is of" in w for w in said.warnings)
    assert any("no complete backup in this workspace yet; starting a new run" in w for w in said.warnings)


def test_a_damaged_backup_of_this_training_stops_the_run_by_its_config_or_its_id(tmp_path):
    out = tmp_path / "out" / "x.safetensors"
    ws = tmp_path / "ws"
    ours = _backup(ws / "a", out, 1, 10, "t")
    (ours / "state.pt").write_bytes(b"")  # config readable: this training's
    state, _ = _continuing(ws / "b", [ws / "a"], out)
    with pytest.raises(TrainingError, match=rf"no backup of this training can be read: {ours.resolve()} \(state.pt is empty\)"):
        resume_past_damaged(state)
    copied = _backup(ws / "a", out, 2, 0, "t")
    (copied / "config.json").unlink()  # config gone, but its id is that of another backup of this training
    state, said = _continuing(ws / "b", [ws / "a"], out)
    with pytest.raises(TrainingError, match=rf"can be read: .*{copied.name} \(config.json is missing\); .*{ours.name}"):
        resume_past_damaged(state)
    assert not any("does not say which training" in w for w in said.warnings)
