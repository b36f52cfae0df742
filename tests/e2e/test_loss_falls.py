"""The trainer really learns: with fixed noise and timesteps on one image, the loss falls."""

import shutil

import torch

from ot_gradio.config.io import load_config
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer


class Collect(Reporter):
    def __init__(self):
        self.events = []

    def metrics(self, **fields):
        self.events.append(fields)

    def warning(self, message):
        self.events.append({"warning": message})


def fixed_noise(latents):
    g = torch.Generator().manual_seed(1234)
    noise = torch.randn(latents.shape, generator=g)
    return noise, torch.full((latents.shape[0],), 500, dtype=torch.long)


def test_lora_loss_falls_with_fixed_noise(lora_config, shapes, tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    first = sorted(p for p in shapes.iterdir() if p.suffix == ".png")[0]
    shutil.copy(first, one / first.name)
    shutil.copy(first.with_suffix(".txt"), one / first.with_suffix(".txt").name)
    data = lora_config(concepts=[{"name": "one", "path": str(one)}], batch_size=1, epochs=25, samples=[], learning_rate=3e-3)
    config = load_config(data).config
    run = tmp_path / "run"
    paths = RunPaths(run / "samples", run / "backup", run / "save", None, [])
    report = Collect()
    trainer = Trainer(config, paths, report, noise_fn=fixed_noise)
    trainer.setup()
    assert trainer.train() == "done"
    losses = [e["loss"] for e in report.events if "loss" in e]
    assert len(losses) == 25
    start, end = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert end < 0.7 * start, (start, end, losses)
