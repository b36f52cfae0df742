"""An epoch whose few samples fill no batch trains no step while the run goes on (OneTrainer's
trainer does the same): said by the run, counted out of the schedule; a run none of whose epochs
trains is refused at setup."""

from __future__ import annotations

import pytest
from PIL import Image


def _folder(root):
    folder = root / "two-shapes"
    folder.mkdir()
    for name in "ab":
        Image.new("RGB", (64, 64), (200, 40, 40)).save(folder / f"{name}.png")
        Image.new("RGB", (128, 64), (40, 40, 200)).save(folder / f"wide-{name}.png")
        for stem in (name, f"wide-{name}"):
            (folder / f"{stem}.txt").write_text("a shape")
    return folder


def _setup(tiny_model, data, work, **changes):
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import RunPaths, Trainer
    from tests.trainer_runs import Losses, tiny_sd15_lora_config

    class Said(Losses):
        def __init__(self):
            super().__init__()
            self.warnings = []

        def warning(self, message):
            self.warnings.append(message)

    report = Said()
    config = load_config(tiny_sd15_lora_config(tiny_model, data, work, **changes)).config
    return Trainer(config, RunPaths(work / "s", work / "b", work / "o", None, []), report), report


def test_epochs_that_fill_no_batch_train_no_step_and_are_said(tiny_model, tmp_path):
    from ot_gradio.config.io import load_config
    from ot_gradio.data import build_dataset
    from ot_gradio.data.buckets import Bucketing
    from tests.trainer_runs import tiny_sd15_lora_config

    data = _folder(tmp_path)
    concept = {"name": "c", "path": str(data), "balancing": 2, "balancing_strategy": "SAMPLES"}
    for seed in range(60):  # a seed whose first epoch is empty (a square and a wide image) and some later one is not
        config = load_config(tiny_sd15_lora_config(tiny_model, data, tmp_path / "probe", seed=seed, concepts=[concept])).config
        dataset = build_dataset(config.concepts, config.resolution, 2, bucketing=Bucketing.from_config(config, 8), seed=seed)
        steps = [dataset.steps_in_epoch(e) for e in range(6)]
        if steps[0] == 0 and any(steps):
            break
    else:
        pytest.fail("no seed gave an empty first epoch and a later full one")

    trainer, report = _setup(tiny_model, data, tmp_path / "run", seed=seed, concepts=[concept], batch_size=2, epochs=6)
    trainer.setup()  # the first epoch's empty plan refused the run here
    assert trainer.total_steps == sum(steps) and trainer.steps_per_epoch == 1
    empty = [str(e + 1) for e, n in enumerate(steps) if not n]
    assert any(f"{len(empty)} of the run's 6 epochs train no step (epoch {', '.join(empty)})" in w for w in report.warnings)
    assert trainer.train() == "done" and len(report.losses) == sum(steps)

    refused, _ = _setup(tiny_model, data, tmp_path / "none", seed=seed, concepts=[{**concept, "balancing": 1}], batch_size=2, epochs=3)
    with pytest.raises(Exception, match="batch size 2 is larger than every bucket"):  # one image an epoch: never a batch
        refused.setup()
    one, _ = _setup(tiny_model, data, tmp_path / "one", seed=seed, concepts=[concept], batch_size=2, epochs=1)
    with pytest.raises(Exception, match="none of the run's 1 epoch"):  # its one epoch is the empty one
        one.setup()
