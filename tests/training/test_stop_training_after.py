"""`stop_training_after` in every unit OneTrainer's configs carry: steps and epochs exactly,
seconds, minutes and hours of this start's training time, ALWAYS before the first step (those
four were accepted and never stopped a part)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ot_gradio.training import trainer as trainer_module
from ot_gradio.training.backup import Counters
from ot_gradio.training.distributed import Distributed
from ot_gradio.training.param_groups import ParamGroup
from ot_gradio.training.trainer import Trainer


class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def _trainer(after, unit, clock):
    trainer = Trainer.__new__(Trainer)
    trainer.config = SimpleNamespace(text_encoder=SimpleNamespace(stop_training_after=after, stop_training_after_unit=unit))
    trainer.param_groups = [ParamGroup("text_encoder", [torch.nn.Parameter(torch.zeros(2))], 1e-3)]
    trainer.counters, trainer.dist, trainer.train_started = Counters(), Distributed(), None
    trainer.warnings = []
    trainer.report = SimpleNamespace(warning=trainer.warnings.append)
    trainer._set_train_modes = trainer._cache_frozen_text = lambda: None
    return trainer


@pytest.mark.parametrize(("after", "unit", "seconds"), [(90, "SECOND", 90), (2, "MINUTE", 120), (1, "HOUR", 3600)])
def test_a_part_stops_after_its_training_time(after, unit, seconds, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(trainer_module.time, "monotonic", clock.monotonic)
    trainer = _trainer(after, unit, clock)
    trainer._stop_parts_if_due()  # in setup, before the steps: no time trained yet
    assert not trainer.param_groups[0].frozen
    trainer.train_started = clock.now
    clock.now += seconds - 1
    trainer._stop_parts_if_due()
    assert not trainer.param_groups[0].frozen
    clock.now += 1
    trainer._stop_parts_if_due()
    group = trainer.param_groups[0]
    assert group.frozen and not group.params[0].requires_grad and group.lr == 0.0
    assert trainer.warnings == [f"text_encoder: stopped training after {after} {unit.lower()}s"]


def test_always_freezes_the_part_before_the_first_step_and_never_keeps_it(monkeypatch):
    for after in (None, 5):
        trainer = _trainer(after, "ALWAYS", Clock())
        trainer._stop_parts_if_due()
        assert trainer.param_groups[0].frozen and "not trained" in trainer.warnings[0]
    trainer = _trainer(5, "NEVER", Clock())
    trainer.counters.global_step = trainer.counters.epoch = 100
    trainer._stop_parts_if_due()
    assert not trainer.param_groups[0].frozen


def test_steps_and_epochs_stop_exactly_after_n():
    for unit, counter in (("STEP", "global_step"), ("EPOCH", "epoch")):
        trainer = _trainer(3, unit, Clock())
        setattr(trainer.counters, counter, 2)
        trainer._stop_parts_if_due()
        assert not trainer.param_groups[0].frozen
        setattr(trainer.counters, counter, 3)
        trainer._stop_parts_if_due()
        assert trainer.param_groups[0].frozen


def test_a_run_whose_every_trained_part_stops_before_the_first_step_is_refused(tiny_model, four_shapes, tmp_path):
    """ALWAYS, or a stop after 0, on every part that trains leaves nothing to train: refused in
    setup, naming the fields, as a run with every part's training off is (a run of ALWAYS on the
    text encoder alone trains, set up as one that does not train it)."""
    from ot_gradio.config.io import load_config
    from ot_gradio.training.preflight import TrainingError
    from ot_gradio.training.trainer import RunPaths, Trainer
    from tests.trainer_runs import Losses, tiny_sd15_lora_config

    always, at_once = {"stop_training_after_unit": "ALWAYS"}, {"stop_training_after": 0, "stop_training_after_unit": "STEP"}
    for name, changes, refused in (("both", {"text_encoder": {"train": True, **always}, "unet": always}, True),
                                   ("unet", {"text_encoder": {"train": False}, "unet": always}, True),
                                   ("now", {"text_encoder": {"train": True, **at_once}, "unet": always}, True),
                                   ("text", {"text_encoder": {"train": True, **always}}, False)):
        work = tmp_path / name
        config = tiny_sd15_lora_config(tiny_model, four_shapes, work, epochs=1, batch_size=4, **changes)
        trainer = Trainer(load_config(config).config, RunPaths(work / "s", work / "b", work / "o", None, []), Losses())
        if refused:
            with pytest.raises(TrainingError, match="stop_training_after_unit"):
                trainer.setup()
        else:
            trainer.setup()  # frozen before the rest of setup: its outputs cached on disk as a text encoder that never trains
            assert not trainer.trained_text_parts and trainer.text_cache_off_reason is None and trainer.diffusion.text_cache is not None
            encoder = {id(m) for m in trainer.model.text_encoder.modules()}
            assert trainer.cast_once and not any(id(layer) in encoder for layer in trainer.cast_once)  # no step runs it
            assert trainer.train() == "done"
