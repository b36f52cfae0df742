"""Helpers the end-to-end run tests share: a run through the page's supervisor to the end."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ot_gradio.runner.supervisor import Supervisor

ROOT = Path(__file__).resolve().parents[2]


def tiny_fixture(name: str, fixture_name: str):
    """A module fixture named `fixture_name`: the tiny model `tiny:<name>` saved in a folder of
    its own (its diffusers folder and single file), which a test file's runs may change."""

    @pytest.fixture(scope="module", name=fixture_name)
    def saved(tmp_path_factory):
        from ot_gradio.models.tiny import all_tiny_models

        _, build = all_tiny_models()[f"tiny:{name}"]
        return build(tmp_path_factory.mktemp(f"tiny-{name}"))

    return saved


def local_pipeline(folder, pipeline_class=None):
    """The diffusers pipeline saved in `folder` (its own class unless `pipeline_class` is given),
    loaded with no download and no progress bar."""
    from diffusers import DiffusionPipeline

    pipe = (pipeline_class or DiffusionPipeline).from_pretrained(str(folder), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def run_until_done(config, tmp_path, timeout=600):
    """Start `config` as the page would (a worker process of the supervisor of `tmp_path/ws`),
    wait for it and check it ended "done"; returns (run folder, its events)."""
    sup = Supervisor(tmp_path / "ws")
    run = sup.start(config)
    assert sup.wait(run, timeout=timeout) == 0, run.log_tail()
    events = [json.loads(line) for line in run.events.read_text().splitlines()]
    assert [e["status"] for e in events if e["type"] == "status"][-1] == "done", run.log_tail()
    return run, events


def train_from_cli(config: dict, tmp_path, name: str = "config.json", timeout: int = 900) -> None:
    """`config` (ours or in OneTrainer's layout) written to `tmp_path/name` and trained by
    `python -m ot_gradio train --config` in its own process, which must exit 0."""
    path = tmp_path / name
    path.write_text(json.dumps(config))
    run = subprocess.run([sys.executable, "-m", "ot_gradio", "train", "--config", str(path)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]


def imported(preset, model_dir, data, tmp_path, out, **changes) -> dict:
    """`preset` (a path or a dict) imported as the page imports it, then only the base model
    (`model_dir`), the dataset folder, the output (`tmp_path/out/<out>`) and the run folders set,
    plus `changes`: how the family tests run OneTrainer's presets and ours."""
    from ot_gradio.config.io import config_to_dict, load_config

    config = config_to_dict(load_config(preset).config)
    config.update(
        base_model_name=str(model_dir), concepts=[{"name": "shapes", "path": str(data)}],
        output_model_destination=str(tmp_path / "out" / out), workspace_dir=str(tmp_path / "ws"),
        cache_dir=str(tmp_path / "cache"), train_device="cpu", **changes,
    )
    return config


def train_in_process(config: dict, tmp_path):
    """`config` trained by a Trainer in this process (samples, backups and saves under tmp_path/run),
    to the end; returns the trainer and the run's warnings."""
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    warned: list[str] = []

    class Noted(Reporter):
        def warning(self, message):
            warned.append(message)

    run = tmp_path / "run"
    trainer = Trainer(load_config(config).config, RunPaths(run / "samples", run / "backup", run / "save", None, []), Noted())
    trainer.setup()
    assert trainer.train() == "done"
    return trainer, warned


def one_image(shapes, tmp_path):
    """A folder holding the red circle of the shapes dataset alone (for the loss-falls tests)."""
    import shutil

    data = tmp_path / "one"
    data.mkdir()
    for suffix in (".png", ".txt"):
        shutil.copy(shapes / f"01-red-circle{suffix}", data)
    return data


def fixed_noise(latents):
    """The same noise and timestep (500 of 1000) at every step: the loss then measures the fit alone."""
    import torch

    return torch.randn(latents.shape, generator=torch.Generator().manual_seed(1234)), torch.full((latents.shape[0],), 500)


def losses_with_fixed_noise(config: dict, tmp_path) -> list[float]:
    """Train `config` in this process with `fixed_noise`; the loss of every step, the run ended "done"."""
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    class Collect(Reporter):
        def __init__(self):
            self.losses = []

        def metrics(self, **fields):
            if "loss" in fields:
                self.losses.append(fields["loss"])

        def warning(self, message):
            pass

    report = Collect()
    run = tmp_path / "run"
    trainer = Trainer(load_config(config).config, RunPaths(run / "samples", run / "backup", run / "save", None, []), report,
                      noise_fn=fixed_noise)
    trainer.setup()
    assert trainer.train() == "done"
    return report.losses


def falls(losses: list[float], factor: float) -> bool:
    """The mean of the last three losses is below `factor` times the mean of the first three."""
    return sum(losses[-3:]) / 3 < factor * sum(losses[:3]) / 3


def lora_load_problems(pipe, path, libraries=("diffusers", "peft"), must_log: bool = False, **load) -> list[str]:
    """The warnings these libraries (their loggers) and Python give while `pipe.load_lora_weights(path)`
    (unexpected or missing keys); an empty list means the file loaded cleanly. `must_log`: diffusers
    must have logged something (INFO is let through), which shows the capture works. `load`: more
    keywords of load_lora_weights (load_into_transformer_2)."""
    import logging
    import warnings

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    loggers = [logging.getLogger(name) for name in libraries]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe.load_lora_weights(str(path), **load)
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
    assert not must_log or any(r.name.startswith("diffusers") for r in records), "log capture saw nothing"
    problems = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    # ResourceWarning: the garbage collector reporting some earlier test's object (an unclosed event
    # loop) while the file loads, which says nothing about the file
    ignored = (DeprecationWarning, FutureWarning, ResourceWarning)
    return problems + [str(w.message) for w in caught if not issubclass(w.category, ignored)]


def video_latents(pipe, prompt: str | None, guidance_scale: float, **inputs) -> np.ndarray:
    """A video pipeline's latents for a fixed seed (5 frames of 32 px, 2 steps: the tiny VAEs'
    decoders flatten differences, so LoRA effects are compared before decoding); `inputs`: the
    pipeline's others (an image-to-video one's `image`; `prompt_embeds` for a None prompt)."""
    import torch

    return pipe(prompt=prompt, height=32, width=32, num_frames=5, num_inference_steps=2, guidance_scale=guidance_scale,
                generator=torch.Generator().manual_seed(0), output_type="latent", **inputs).frames.float().numpy()


def clip_run(config, tmp_path, frames: int | None = None) -> tuple[list[dict], list[str]]:
    """A LoRA run on tests/video_clips.write_clips_and_an_image's folder (three clips and an image,
    batch 1) to tmp_path/out/lora.safetensors: four finite losses; with `frames`, its samples are
    .mp4 clips of that many frames (not stills); every LoRA layer of the file trained. Returns the
    run's events and the file's keys."""
    from safetensors import safe_open

    from ot_gradio.data.video import FrameSampling, probe_clip

    _, events = run_until_done(config, tmp_path)
    losses = [e["loss"] for e in events if e["type"] == "metrics" and "loss" in e]
    assert len(losses) == 4 and all(np.isfinite(losses)), losses
    if frames is not None:
        samples = [e for e in events if e["type"] == "sample"]
        assert samples and all(e["path"].endswith(".mp4") for e in samples)
        assert probe_clip(samples[-1]["path"], FrameSampling(frames=100, step=1, fps=1000.0)).available == frames
    with safe_open(str(Path(tmp_path) / "out" / "lora.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert all(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)  # every layer trained
    return events, keys
