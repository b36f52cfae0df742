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
