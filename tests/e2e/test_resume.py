"""Continue from last backup: a stopped run resumes where it stopped, and settings that make
resuming impossible are refused."""

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer, TrainingError


class StopAt(Reporter):
    def __init__(self, step=None):
        self.step = step
        self.global_step = 0
        self.statuses = []

    def metrics(self, **fields):
        self.global_step = fields["global_step"]

    def status(self, status, message=""):
        self.statuses.append((status, message))

    def requests(self):
        return {"stop"} if self.step is not None and self.global_step >= self.step else set()


def _paths(run, others=()):
    return RunPaths(run / "samples", run / "backup", run / "save", None, [run, *others])


def _run(config, run, reporter, others=()):
    trainer = Trainer(config, _paths(run, others), reporter)
    trainer.setup()
    return trainer, trainer.train()


def _weights(trainer):
    return {k: v.clone() for k, v in trainer.method.trainable_state(trainer.model).items()}


def test_stopped_run_resumes_to_the_same_weights(lora_config, tmp_path):
    data = lora_config(samples=[], epochs=3, backup_before_save=False)
    config = load_config(data).config

    straight, status = _run(config, tmp_path / "straight", StopAt())
    assert status == "done"

    first, status = _run(config, tmp_path / "a", StopAt(step=5))
    assert status == "stopped" and first.counters.global_step == 5
    resumed_config = load_config({**data, "continue_last_backup": True}).config
    report = StopAt()
    second, status = _run(resumed_config, tmp_path / "b", report, others=[tmp_path / "a"])
    assert status == "done"
    assert any("continuing from backup" in m for _, m in report.statuses)
    assert second.counters.global_step == straight.counters.global_step
    a, b = _weights(straight), _weights(second)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed run differs from the uninterrupted one"


def test_resume_refuses_a_changed_batch_size(lora_config, tmp_path):
    data = lora_config(samples=[], epochs=2)
    _run(load_config(data).config, tmp_path / "a", StopAt(step=2))
    changed = load_config({**data, "continue_last_backup": True, "batch_size": 1}).config
    with pytest.raises(TrainingError, match="batch_size"):
        _run(changed, tmp_path / "b", StopAt(), others=[tmp_path / "a"])


class Said(StopAt):
    def __init__(self):
        super().__init__()
        self.warnings = []

    def warning(self, message):
        self.warnings.append(message)


def test_resume_takes_only_a_backup_of_this_training(lora_config, tmp_path):
    """A workspace holds other trainings' runs: their backups are never continued (they would save
    another model under this name); a backup at its last epoch asks for more epochs; an earlier
    start whose output got a numbered name is this training, and goes on saving there."""
    data = lora_config(samples=[], epochs=1)
    out = tmp_path / "out"
    first = {**data, "output_model_destination": str(out / "lora-2.safetensors")}  # the name the queue gave it
    trainer, status = _run(load_config(first).config, tmp_path / "a", StopAt())
    assert status == "done" and trainer.counters.epoch == 1

    other = load_config({**data, "continue_last_backup": True, "output_model_destination": str(out / "another.safetensors")}).config
    with pytest.raises(TrainingError, match=r"no backup in this workspace is of a run that saves to .*another.safetensors; the "
                                            r"newest, a/.* saves to .*lora-2.safetensors"):
        _run(other, tmp_path / "b", StopAt(), others=[tmp_path / "a"])
    said = Said()  # at its end already: saved as it is (a run killed before its save gets its model), and said
    same = load_config({**data, "continue_last_backup": True}).config  # lora.safetensors: the name before the number
    trainer, status = _run(same, tmp_path / "c", said, others=[tmp_path / "a"])
    assert status == "done" and trainer.counters.global_step == 5  # the demo set: 5 steps an epoch at batch 2
    assert any("has trained 1 epoch(s) (step 5), and this run's Epochs is 1: nothing is left to train" in w for w in said.warnings)

    report = Said()
    more = load_config({**data, "continue_last_backup": True, "epochs": 2}).config
    trainer, status = _run(more, tmp_path / "d", report, others=[tmp_path / "a"])
    assert status == "done" and trainer.counters.epoch == 2
    assert (out / "lora-2.safetensors").is_file() and not (out / "lora.safetensors").exists()
    assert any("saved to" in w and "lora-2.safetensors, so this run saves there too" in w for w in report.warnings), report.warnings
