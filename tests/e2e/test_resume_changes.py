"""Continue from last backup with settings changed since the backup, as OneTrainer continues:
new learning rates and a new schedule apply at the resumed step, another optimizer starts fresh,
changed optimizer settings keep the backup's values and say so, and a changed LoRA structure is
refused naming the setting. Unchanged, every optimizer resumes exactly."""

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.training.resume import must_match_problems
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer, TrainingError


class Watch(Reporter):
    def __init__(self, stop_at=None):
        self.stop_at, self.global_step, self.warnings, self.lrs = stop_at, 0, [], {}

    def metrics(self, **fields):
        self.global_step = fields["global_step"]
        self.lrs[self.global_step] = fields["lrs"]

    def warning(self, message):
        self.warnings.append(message)

    def requests(self):
        return {"stop"} if self.stop_at is not None and self.global_step >= self.stop_at else set()


def _run(data, run, report, others=()):
    trainer = Trainer(load_config(data).config, RunPaths(run / "samples", run / "backup", run / "save", None, [run, *others]), report)
    trainer.setup()
    return trainer, trainer.train()


def _resumed(data, tmp_path, changes, name="b"):
    report = Watch()
    trainer, status = _run({**data, "continue_last_backup": True, **changes}, tmp_path / name, report, others=[tmp_path / "a"])
    return trainer, status, report


def _said(report, text):
    return [w for w in report.warnings if text in w]


@pytest.mark.parametrize("schedule", [
    {"learning_rate_scheduler": "COSINE", "learning_rate_warmup_steps": 2},
    {"learning_rate_scheduler": "CUSTOM", "custom_learning_rate_scheduler": "torch.optim.lr_scheduler.StepLR",
     "scheduler_params": [{"key": "step_size", "value": "2"}, {"key": "gamma", "value": "0.5"}], "learning_rate_warmup_steps": 2},
], ids=["COSINE", "CUSTOM"])
def test_changed_learning_rates_and_schedule_apply_at_the_resumed_step(lora_config, tmp_path, schedule):
    data = lora_config(samples=[], epochs=2, backup_before_save=False, learning_rate=1e-3, **schedule)
    assert _run(data, tmp_path / "a", Watch(stop_at=3))[1] == "stopped"
    changes = {"learning_rate": 1e-2, "text_encoder": {"learning_rate": 5e-3}, "learning_rate_warmup_steps": 0}
    if schedule["learning_rate_scheduler"] == "CUSTOM":
        changes["scheduler_params"] = [{"key": "step_size", "value": "2"}, {"key": "gamma", "value": "0.1"}]
    trainer, status, report = _resumed(data, tmp_path, changes)
    assert status == "done"
    straight = Watch()
    _run({**data, **changes}, tmp_path / "straight", straight)
    # the rates each resumed step trained with are those of an uninterrupted run with the new settings
    assert report.lrs and all(report.lrs[s] == straight.lrs[s] for s in report.lrs), (report.lrs, straight.lrs)
    assert report.lrs[4]["text_encoder"] != report.lrs[4]["unet"]
    said = _said(report, "learning rate 0.001 -> 0.01 from the backup's (unet)")
    assert said and "learning rate 0.001 -> 0.005 from the backup's (text_encoder)" in said[0]
    assert "learning_rate_warmup_steps 2.0 -> 0.0" in said[0] and "continued at step 3" in said[0]


@pytest.mark.parametrize("optimizer", ["SGD", "LION"])
def test_another_optimizer_starts_fresh_with_its_own_settings(lora_config, tmp_path, optimizer):
    data = lora_config(samples=[], epochs=2, backup_before_save=False)
    _run(data, tmp_path / "a", Watch(stop_at=3))
    trainer, status, report = _resumed(data, tmp_path, {"optimizer": {"optimizer": optimizer}})
    assert status == "done" and _said(report, f"optimizer changed ADAMW -> {optimizer}: its state starts fresh")
    fresh = Trainer(load_config({**data, "optimizer": {"optimizer": optimizer}}).config,
                    RunPaths(*(tmp_path / "f" / n for n in ("s", "b", "v")), None, [tmp_path / "f"]), Reporter())
    fresh.setup()
    settings = [{k: v for k, v in g.items() if k != "params"} for g in fresh.optimizer.param_groups]
    assert [{k: v for k, v in g.items() if k != "params"} for g in trainer.optimizer.param_groups] == settings


def test_changed_optimizer_settings_keep_the_backups_values_and_say_so(lora_config, tmp_path):
    data = lora_config(samples=[], epochs=2, backup_before_save=False, optimizer={"optimizer": "ADAMW", "weight_decay": 0.01})
    _run(data, tmp_path / "a", Watch(stop_at=3))
    trainer, status, report = _resumed(data, tmp_path, {"optimizer": {"optimizer": "ADAMW", "weight_decay": 0.1},
                                                        "dropout_probability": 0.1})
    assert status == "done" and all(g["weight_decay"] == 0.01 for g in trainer.optimizer.param_groups)
    assert _said(report, "ADAMW settings changed since the backup (weight_decay 0.01 -> 0.1): the backup's values stay in effect")
    # a setting outside the optimizer applies, and is said with both values
    assert _said(report, "changed since the backup, this run's values apply from step 3 on: LoRA dropout (dropout_probability) 0.0 -> 0.1")


@pytest.mark.parametrize("optimizer", [
    {"optimizer": "PRODIGY"}, {"optimizer": "DADAPT_ADAM"}, {"optimizer": "ADAMW", "fused_back_pass": True},
    {"optimizer": "ADAFACTOR", "relative_step": True, "scale_parameter": True, "warmup_init": False},
], ids=["PRODIGY", "DADAPT_ADAM", "fused_back_pass", "ADAFACTOR"])
def test_unchanged_settings_resume_exactly(lora_config, tmp_path, optimizer):
    """Optimizers whose state holds the step size (Prodigy's d, D-Adaptation's) and the fused back pass's per-weight state."""
    extra = {"learning_rate": 1.0} if optimizer["optimizer"] != "ADAMW" else {}
    if optimizer["optimizer"] == "ADAFACTOR":
        extra = {"learning_rate_scheduler": "ADAFACTOR"}
    data = lora_config(samples=[], epochs=2, backup_before_save=False, optimizer=optimizer, **extra)
    straight, _ = _run(data, tmp_path / "straight", Watch())
    _run(data, tmp_path / "a", Watch(stop_at=3))
    second, status, report = _resumed(data, tmp_path, {})
    assert status == "done" and not _said(report, "continue_last_backup")
    a, b = straight.method.trainable_state(straight.model), second.method.trainable_state(second.model)
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed run differs from the uninterrupted one"


def test_resume_refuses_a_changed_lora_structure_naming_the_setting(lora_config, tmp_path):
    data = lora_config(samples=[], epochs=2, lora_rank=4, lora_alpha=4)
    _run(data, tmp_path / "a", Watch(stop_at=2))
    for i, (changes, said) in enumerate([
        ({"lora_alpha": 1}, "lora_alpha=4.0 (Alpha) but this run has lora_alpha=1.0"),
        ({"peft_type": "LOHA"}, "peft_type='LORA' (Adapter type) but this run has peft_type='LOHA'"),
        ({"text_encoder": {"train": False}}, "text_encoder.train=True (Train) but this run has text_encoder.train=False"),
        ({"layer_filter_preset": "attn-only"}, "layer_filter_preset='full' (Layer preset) but this run has layer_filter_preset='attn-only'"),
        ({"lora_decompose": True}, "lora_decompose=False (DoRA) but this run has lora_decompose=True"),
    ]):
        with pytest.raises(TrainingError, match=r"the backup .* was made with " + said.replace("(", r"\(").replace(")", r"\)")):
            _resumed(data, tmp_path, changes, name=f"b{i}")


def test_a_lora_structure_must_match_only_for_the_lora_method():
    def config(**over):
        return load_config({"training_method": "FINE_TUNE", **over}).config

    old = config().model_dump(mode="json")
    assert must_match_problems(old, config(lora_alpha=8, peft_type="LOKR", text_encoder={"train": False})) == []
    lora = config(training_method="LORA").model_dump(mode="json")
    assert must_match_problems(lora, config(training_method="LORA", lokr_dim=4)) == []  # not a LoKr
    assert must_match_problems({k: v for k, v in lora.items() if k != "lora_alpha"}, config(training_method="LORA")) == []  # an older backup: the default
    assert must_match_problems(lora, config(training_method="LORA", lora_alpha=8)) == ["lora_alpha=1.0 (Alpha) but this run has lora_alpha=8.0"]
