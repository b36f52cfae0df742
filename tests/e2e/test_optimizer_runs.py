"""The trainer with the optimizers that need its help: schedule-free (averaged weights for samples,
saves and backups), the fused back pass and adaptive Adafactor."""

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

pytestmark = pytest.mark.slow


class Collect(Reporter):
    def __init__(self, stop_at=None):
        self.stop_at = stop_at
        self.metrics_seen = []

    def metrics(self, **fields):
        self.metrics_seen.append(fields)

    def requests(self):
        done = self.metrics_seen[-1]["global_step"] if self.metrics_seen else 0
        return {"stop"} if self.stop_at is not None and done >= self.stop_at else set()


def _run(config, run, reporter, others=()):
    trainer = Trainer(config, RunPaths(run / "samples", run / "backup", run / "save", None, [run, *others]), reporter)
    trainer.setup()
    return trainer, trainer.train()


def _weights(trainer):
    return {k: v.clone() for k, v in trainer.method.trainable_state(trainer.model).items()}


def test_schedule_free_resumes_exactly_and_saves_the_averaged_weights(lora_config, tmp_path):
    from ot_gradio.training.optimizers import optimizer_eval_mode, optimizer_train_mode

    data = lora_config(samples=[], epochs=2, backup_before_save=False, optimizer={"optimizer": "SCHEDULE_FREE_ADAMW"})
    config = load_config(data).config
    run = tmp_path / "straight"
    straight = Trainer(config, RunPaths(run / "samples", run / "backup", run / "save", None, [run]), Collect())
    straight.setup()
    saved = []
    save = straight.method.save
    straight.method.save = lambda *args: (saved.append(_weights(straight)), save(*args))[1]
    assert straight.train() == "done"
    optimizer_eval_mode(straight.optimizer)
    averaged = _weights(straight)
    assert all(torch.allclose(saved[-1][k], averaged[k], atol=1e-6) for k in averaged)  # the saved model is the average
    optimizer_train_mode(straight.optimizer)
    assert any(not torch.allclose(averaged[k], v, atol=1e-4) for k, v in _weights(straight).items())  # not the training weights

    _, status = _run(config, tmp_path / "a", Collect(stop_at=3))
    assert status == "stopped"
    resumed, status = _run(load_config({**data, "continue_last_backup": True}).config, tmp_path / "b", Collect(),
                           others=[tmp_path / "a"])
    assert status == "done"
    optimizer_eval_mode(resumed.optimizer)
    again = _weights(resumed)
    assert all(torch.allclose(averaged[k], again[k], atol=1e-6) for k in averaged), "resumed run differs from the uninterrupted one"


@pytest.mark.parametrize("accumulation", [1, 2])  # 2: the trainer tells the hooks which backward pass ends a window
def test_fused_back_pass_trains_like_the_plain_step(lora_config, tmp_path, accumulation):
    results = []
    for fused in (False, True):
        data = lora_config(samples=[], epochs=2, clip_grad_norm=None, gradient_accumulation_steps=accumulation,
                           optimizer={"optimizer": "ADAMW", "fused_back_pass": fused, "fused": False})
        trainer, status = _run(load_config(data).config, tmp_path / f"run{fused}", Collect())
        assert status == "done"
        assert type(trainer.optimizer).__name__ == ("FusedBackPass" if fused else "AdamW")
        results.append(_weights(trainer))
    plain, fused = results
    assert all(torch.allclose(plain[k], fused[k], atol=1e-5) for k in plain)


def test_adaptive_adafactor_reports_its_own_learning_rate(lora_config, tmp_path):
    data = lora_config(samples=[], epochs=1, learning_rate_scheduler="ADAFACTOR",
                       optimizer={"optimizer": "ADAFACTOR", "relative_step": True, "scale_parameter": True})
    report = Collect()
    _, status = _run(load_config(data).config, tmp_path / "run", report)
    assert status == "done"
    lrs = [m["lr"] for m in report.metrics_seen]
    assert lrs and all(lr != 1e-3 for lr in lrs)


def test_the_trainer_gives_kourkoutas_beta_its_warmup_in_optimizer_steps(lora_config, tmp_path):
    data = lora_config(samples=[], epochs=2, learning_rate_warmup_steps=0.5, optimizer={"optimizer": "ADAMW_ADV", "kourkoutas_beta": True})
    trainer = Trainer(load_config(data).config, RunPaths(tmp_path / "s", tmp_path / "b", tmp_path / "v", None, [tmp_path]), Collect())
    trainer.setup()
    assert trainer.total_steps > 1
    assert trainer.optimizer.defaults["k_warmup_steps"] == int(0.5 * trainer.total_steps)  # OneTrainer rounds the fraction down
