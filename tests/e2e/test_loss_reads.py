"""Reading the loss without a host sync per step (`Trainer.defer_loss_reads`, on for GPUs): the
loop logs the same numbers, only later, and a NaN loss still stops the run before anything is
written from its weights. Forced on here, on a CPU, with a read interval longer than the run."""

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.training import trainer as trainer_module
from ot_gradio.training.backup import latest_backup, read_backup
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer, TrainingError

pytestmark = pytest.mark.slow


class Log(Reporter):
    def __init__(self):
        self.trainer = None
        self.metrics_seen = []  # (logged step, the loop's step when it was logged, loss, smooth loss, lr)
        self.progress_seen = []

    def metrics(self, **fields):
        now = self.trainer.counters.global_step
        self.metrics_seen.append((fields["global_step"], now, fields["loss"], fields["smooth_loss"], fields["lr"]))

    def progress(self, **fields):
        if fields.get("phase") == "training":
            self.progress_seen.append((fields["epoch"], fields["step"], fields["global_step"]))


def _fixed_noise(nan_at=None):
    calls = {"n": 0}

    def noise_fn(latents):
        calls["n"] += 1
        noise = torch.randn(latents.shape, generator=torch.Generator().manual_seed(calls["n"]))
        if calls["n"] == nan_at:
            noise[0, 0, 0, 0] = float("nan")
        return noise, torch.full((latents.shape[0],), 500)

    return noise_fn


def _run(data, run, defer, nan_at=None):
    paths = RunPaths(run / "samples", run / "backup", run / "save", None, [run])
    log = Log()
    trainer = Trainer(load_config(data).config, paths, log, noise_fn=_fixed_noise(nan_at))
    log.trainer = trainer
    trainer.setup()
    trainer.defer_loss_reads = defer
    return trainer, log


def test_deferred_reads_log_the_same_steps_later(lora_config, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_module, "LOSS_READ_SECONDS", 1e9)
    data = lora_config(samples=[], epochs=2, learning_rate_scheduler="COSINE", save_every=3, save_every_unit="STEP",
                       save_keep_last=1)
    logs = {}
    for defer in (False, True):
        trainer, log = _run(data, tmp_path / f"run-{defer}", defer)
        assert trainer.train() == "done"
        logs[defer] = log
        # Keep last saves 1: of the saves every 3 steps only the newest is left in the run's save folder
        last = trainer.counters.global_step // 3 * 3
        assert [p.name for p in (tmp_path / f"run-{defer}" / "save").iterdir()] == [f"lora-step{last}.safetensors"]
    now, later = logs[False], logs[True]
    steps = [m[0] for m in now.metrics_seen]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 6
    assert [m[1] for m in now.metrics_seen] == steps  # read at once: logged in its own step
    # deferred: nothing is read until an output needs the weights (saves every 3 steps) or the run ends
    assert [m[1] for m in later.metrics_seen] == [min(-(-s // 3) * 3, steps[-1]) for s in steps]
    assert [m[0] for m in later.metrics_seen] == steps
    for a, b in zip(now.metrics_seen, later.metrics_seen, strict=True):
        assert a[2] == pytest.approx(b[2], rel=1e-6) and a[3] == pytest.approx(b[3], rel=1e-6) and a[4] == b[4]
    assert later.progress_seen == now.progress_seen  # epoch and step as they were when each step ended


def test_a_nan_loss_read_late_stops_before_the_backup_of_its_weights(lora_config, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_module, "LOSS_READ_SECONDS", 1e9)
    data = lora_config(samples=[], epochs=3, backup_after=2, backup_after_unit="STEP")
    trainer, log = _run(data, tmp_path / "run", defer=True, nan_at=3)
    with pytest.raises(TrainingError, match=r"at step 3 \(images: .*\.png") as err:
        trainer.train()
    assert "nan" in str(err.value).lower()
    assert trainer.counters.global_step == 4  # step 4 ran on NaN weights; the backup due after it was not written
    newest = latest_backup([tmp_path / "run"])
    assert read_backup(newest).counters.global_step == 2
    assert all(torch.isfinite(t).all() for t in read_backup(newest).trainable.values())
    assert [m[0] for m in log.metrics_seen] == [1, 2]  # the steps before the NaN were logged
