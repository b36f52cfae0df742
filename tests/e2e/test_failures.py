"""Failures that must lose nothing: a non-finite loss, a full disk during a backup, an output
folder that cannot be written."""

import errno

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.training import backup as backup_module
from ot_gradio.training.backup import complete_backups, latest_backup, read_backup
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer, TrainingError

pytestmark = pytest.mark.slow


class Collect(Reporter):
    def __init__(self):
        self.statuses = []

    def status(self, status, message=""):
        self.statuses.append(status)


def _trainer(lora_config, run, noise_fn=None, **overrides):
    data = lora_config(samples=[], epochs=3, backup_after=1, backup_after_unit="STEP", **overrides)
    paths = RunPaths(run / "samples", run / "backup", run / "save", None, [run])
    return Trainer(load_config(data).config, paths, Collect(), noise_fn=noise_fn)


def test_non_finite_loss_stops_naming_the_step_and_images_and_keeps_the_last_good_backup(lora_config, tmp_path):
    calls = {"n": 0}

    def noise_fn(latents):
        calls["n"] += 1
        noise = torch.randn(latents.shape, generator=torch.Generator().manual_seed(calls["n"]))
        if calls["n"] == 4:
            noise[0, 0, 0, 0] = float("nan")
        return noise, torch.full((latents.shape[0],), 500)

    trainer = _trainer(lora_config, tmp_path / "run", noise_fn)
    trainer.setup()
    with pytest.raises(TrainingError, match=r"at step 4 \(images: .*\.png") as err:
        trainer.train()
    assert "nan" in str(err.value).lower() and "continue from the last backup" in str(err.value)
    newest = latest_backup([tmp_path / "run"])
    assert read_backup(newest).counters.global_step == 3
    assert all(torch.isfinite(t).all() for t in read_backup(newest).trainable.values())


def test_disk_full_during_a_backup_is_a_clear_error_and_earlier_backups_stay(lora_config, tmp_path, monkeypatch):
    real_save = backup_module.save_file
    calls = {"n": 0}

    def failing_save(tensors, filename, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            real_save(tensors, filename, *args, **kwargs)  # part of the file is there...
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(backup_module, "save_file", failing_save)
    trainer = _trainer(lora_config, tmp_path / "run")
    trainer.setup()
    with pytest.raises(OSError, match=r"disk full: could not write a backup in .*backup \(about .* needed, .* free\).*earlier backups are intact"):
        trainer.train()
    backups = complete_backups(tmp_path / "run" / "backup")
    assert [read_backup(b).counters.global_step for b in backups] == [1, 2]
    assert not [p for p in (tmp_path / "run" / "backup").iterdir() if p.name.startswith(".tmp-")]


def test_an_output_folder_that_cannot_be_written_fails_before_loading(lora_config, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    trainer = _trainer(lora_config, tmp_path / "run", output_model_destination=str(blocker / "out" / "lora.safetensors"))
    with pytest.raises(TrainingError, match="output_model_destination: cannot write to .*a-file"):
        trainer.setup()
    assert "loading" not in trainer.report.statuses
