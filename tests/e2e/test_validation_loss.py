"""Validation concepts: held-out images are never trained, their loss is
computed with fixed noise and timesteps every `validate_after` units, and computing it changes
nothing about the training."""

import shutil

import torch
from safetensors.torch import load_file

from ot_gradio.config.io import load_config
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer


class Collect(Reporter):
    def __init__(self):
        self.validation_events = []
        self.trained_paths = set()
        self.warnings = []

    def validation(self, **fields):
        self.validation_events.append(fields)

    def warning(self, message):
        self.warnings.append(message)


def _split(shapes, tmp_path):
    """Most of the demo images to train on, two held out."""
    train, held = tmp_path / "train", tmp_path / "held"
    train.mkdir()
    held.mkdir()
    images = sorted(p for p in shapes.iterdir() if p.suffix == ".png")
    for i, image in enumerate(images):
        target = held if i < 2 else train
        shutil.copy(image, target / image.name)
        shutil.copy(image.with_suffix(".txt"), target / image.with_suffix(".txt").name)
    return train, held


def _run(config_data, tmp_path, name):
    config = load_config(config_data).config
    run = tmp_path / name
    paths = RunPaths(run / "samples", run / "backup", run / "save", None, [])
    report = Collect()
    trainer = Trainer(config, paths, report)
    trainer.setup()
    original = trainer._forward_backward

    def remember(batch, accum):
        report.trained_paths.update(batch.image_paths)
        return original(batch, accum)

    trainer._forward_backward = remember
    assert trainer.train() == "done"
    return trainer, report


def test_validation_loss_every_step_held_out_and_side_effect_free(lora_config, shapes, tmp_path):
    train, held = _split(shapes, tmp_path)
    concepts = [{"name": "train", "path": str(train)}, {"name": "held", "path": str(held), "type": "VALIDATION"}]
    common = dict(concepts=concepts, epochs=2, text_encoder={"train": False}, learning_rate=3e-3)

    out_on = tmp_path / "on" / "lora.safetensors"
    trainer, report = _run(lora_config(validation=True, validate_after=2, validate_after_unit="STEP",
                                       output_model_destination=str(out_on), **common), tmp_path, "on")
    steps = [e["global_step"] for e in report.validation_events]
    assert steps and steps == list(range(2, trainer.counters.global_step + 1, 2)), steps
    assert all(e["images"] == 2 and torch.isfinite(torch.tensor(e["loss"])) for e in report.validation_events)
    # held-out images are never trained
    held_names = {p.name for p in held.glob("*.png")}
    assert report.trained_paths and not {p.rsplit("/", 1)[-1] for p in report.trained_paths} & held_names
    # fixed draws: the same weights give the same number, and it moves as the weights train
    assert trainer.validator.loss() == trainer.validator.loss()
    losses = [e["loss"] for e in report.validation_events]
    assert len(set(losses)) > 1

    # a run without validation trains exactly the same weights (the training RNG is untouched)
    out_off = tmp_path / "off" / "lora.safetensors"
    _run(lora_config(validation=False, output_model_destination=str(out_off), **common), tmp_path, "off")
    on, off = load_file(str(out_on)), load_file(str(out_off))
    assert on.keys() == off.keys()
    assert all(torch.equal(on[k], off[k]) for k in on)


def test_validation_without_validation_concepts_warns(lora_config, tmp_path):
    _, report = _run(lora_config(validation=True, validate_after=1, validate_after_unit="EPOCH", epochs=1), tmp_path, "none")
    assert report.validation_events == []
    assert any("no enabled concept has the type VALIDATION" in w for w in report.warnings)
