"""Stopping and continuing, as users do it: Ctrl-C in `train` during gradient accumulation, a stop
at a step that also backs up, rolling backups across the runs that continue a training (and never
over a failed run's backups that a fresh run shares an output name with), and a damaged newest
backup (an interrupted copy to or from Drive)."""

import os
import signal

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.runner.rundir import create_run
from ot_gradio.runner.worker import run_worker
from ot_gradio.training.backup import MARKER, complete_backups, read_backup
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer, TrainingError


class Said(Reporter):
    def __init__(self, stop_at=None, fail_at=None):
        self.stop_at, self.fail_at, self.global_step = stop_at, fail_at, 0
        self.statuses, self.warnings = [], []

    def metrics(self, **fields):
        self.global_step = fields["global_step"]
        if self.fail_at is not None and self.global_step >= self.fail_at:
            raise RuntimeError("CUDA out of memory (a test's)")

    def status(self, status, message=""):
        self.statuses.append((status, message))

    def warning(self, message):
        self.warnings.append(message)

    def requests(self):
        return {"stop"} if self.stop_at is not None and self.global_step >= self.stop_at else set()


def _run(data, run, reporter=None, others=()):
    trainer = Trainer(load_config(data).config, RunPaths(run / "samples", run / "backup", run / "save", None, [*others, run]),
                      reporter or Said())
    trainer.setup()
    return trainer, trainer.train()


def _weights(trainer):
    return {k: v.clone() for k, v in trainer.method.trainable_state(trainer.model).items()}


def test_ctrl_c_in_an_accumulation_window_stops_at_its_end_and_resumes_exactly(lora_config, tmp_path, monkeypatch):
    """Ctrl-C after the 6th batch of windows of 4: the run finishes the window (the gradients of
    batches 5 and 6 are in the step, not lost), backs up at batch 8, and the continued run ends
    with the uninterrupted run's weights."""
    data = lora_config(samples=[], epochs=2, batch_size=1, gradient_accumulation_steps=4, tensorboard=False)
    straight, status = _run(data, tmp_path / "straight")
    assert status == "done"

    run = create_run(tmp_path / "ws", data)
    real = Trainer._loss_and_backward
    batches = []

    def interrupted(self, batch, accum):
        batches.append(1)
        loss = real(self, batch, accum)
        if len(batches) == 6:
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C in the terminal running `train`
        return loss

    monkeypatch.setattr(Trainer, "_loss_and_backward", interrupted)
    assert run_worker(run.path) == 0, run.log_tail()
    monkeypatch.setattr(Trainer, "_loss_and_backward", real)
    [stopped] = complete_backups(run.backup)
    assert read_backup(stopped).counters.as_dict() == {"epoch": 0, "epoch_step": 8, "global_step": 2}

    resumed, status = _run({**data, "continue_last_backup": True}, tmp_path / "b", others=[run.path])
    assert status == "done" and resumed.counters == straight.counters
    a, b = _weights(straight), _weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the continued run differs"


def test_rolling_backups_across_resumes_and_a_stop_at_a_backup_step_writes_it_once(lora_config, tmp_path):
    """Rolling backup count 2, a backup every step, stopped at 3 and 6 and continued: 2 complete
    backups on disk in all (the two newest), whatever run folder they are in; another training's
    backups in the workspace are untouched."""
    runs = tmp_path / "ws" / "runs"
    data = lora_config(samples=[], epochs=3, backup_after=1, backup_after_unit="STEP", tensorboard=False)
    other = {**data, "output_model_destination": str(tmp_path / "out" / "other.safetensors"), "rolling_backup": True,
             "rolling_backup_count": 1}
    _run(other, runs / "x", Said(stop_at=2))
    [theirs] = complete_backups(runs / "x" / "backup")

    _run(data, runs / "a", Said(stop_at=3))  # rolling backup off: every step's backup stays, the stop's not twice
    assert [read_backup(b).counters.global_step for b in complete_backups(runs / "a" / "backup")] == [1, 2, 3]

    rolling = {**data, "continue_last_backup": True, "rolling_backup": True, "rolling_backup_count": 2}
    _run(rolling, runs / "b", Said(stop_at=6), others=[runs / "x", runs / "a"])
    _run(rolling, runs / "c", Said(stop_at=9), others=[runs / "x", runs / "a", runs / "b"])
    kept = [b for r in "abc" for b in complete_backups(runs / r / "backup")]
    assert [(b.parent.parent.name, read_backup(b).counters.global_step) for b in kept] == [("c", 8), ("c", 9)]
    assert complete_backups(runs / "x" / "backup") == [theirs]


def test_a_fresh_run_that_kept_a_failed_runs_output_name_leaves_its_backups(lora_config, tmp_path):
    """Run A backs up steps 1-5 and fails before writing its model, so runner/outputs.py gives a
    fresh run B (Continue off, Rolling backup count 2) the same output file: B keeps its own newest
    2, A's 5 stay for the user to continue."""
    runs = tmp_path / "ws" / "runs"
    data = lora_config(samples=[], epochs=3, backup_after=1, backup_after_unit="STEP", tensorboard=False)
    with pytest.raises(RuntimeError, match="out of memory"):
        _run(data, runs / "a", Said(fail_at=6))  # after the backup of step 5
    assert not (tmp_path / "out" / "lora.safetensors").exists()
    theirs = complete_backups(runs / "a" / "backup")
    assert len(theirs) == 5

    rolling = {**data, "rolling_backup": True, "rolling_backup_count": 2}
    _run(rolling, runs / "b", Said(stop_at=3), others=[runs / "a"])
    assert complete_backups(runs / "a" / "backup") == theirs
    assert [read_backup(b).counters.global_step for b in complete_backups(runs / "b" / "backup")] == [2, 3]


def _damage(backup, kind):
    if kind == "trainable cut off":
        file = backup / "trainable.safetensors"
        file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    elif kind == "state empty":
        (backup / "state.pt").write_bytes(b"")
    else:
        (backup / "config.json").unlink()


@pytest.mark.parametrize("kind", ["trainable cut off", "state empty", "config missing"])
def test_a_damaged_newest_backup_is_named_and_the_run_continues_from_the_one_before(kind, lora_config, tmp_path):
    data = lora_config(samples=[], epochs=3, backup_after=2, backup_after_unit="STEP", tensorboard=False)
    _run(data, tmp_path / "a", Said(stop_at=3))  # backups at step 2 (scheduled) and 3 (the stop)
    older, newest = complete_backups(tmp_path / "a" / "backup")
    _damage(newest, kind)
    said = Said(stop_at=5)
    trainer, status = _run({**data, "continue_last_backup": True}, tmp_path / "b", said, others=[tmp_path / "a"])
    assert status == "stopped"
    [warning] = [w for w in said.warnings if "cannot be read" in w]
    assert f"the backup a/{newest.name} cannot be read" in warning and "move it out of the workspace or delete it" in warning
    assert any(f"continuing from backup {older.name} (run a) at step 2" in m for _, m in said.statuses)
    assert newest.is_dir() and (newest / MARKER).exists()  # never deleted

    _damage(older, kind)  # nothing readable left: the run stops naming them, it does not start anew
    if kind == "config missing":  # ... unless none says it is of this training: then they may be another's
        said = Said(stop_at=1)
        _run({**data, "continue_last_backup": True}, tmp_path / "c", said, others=[tmp_path / "a"])
        assert sorted(w.split(" cannot be read")[0] for w in said.warnings if "does not say which training" in w) == [
            f"continue_last_backup: the backup a/{b.name}" for b in sorted([older, newest], key=lambda b: b.name)]
        assert any("starting a new run" in w for w in said.warnings) and older.is_dir() and newest.is_dir()
        return
    with pytest.raises(TrainingError, match=rf"no backup of this training can be read: .*{older.name}.*{newest.name}|"
                                            rf"no backup of this training can be read: .*{newest.name}.*{older.name}"):
        _run({**data, "continue_last_backup": True}, tmp_path / "c", Said(), others=[tmp_path / "a"])
