"""Samples during training: every enabled prompt of the config rendered with the model being
trained, written as image files (a video family's as .mp4 clips, played at the run's clip frame
rate, or as a folder of PNG / JPG frames with `sample_video_format`), reported as events and, with `samples_to_tensorboard`, shown in TensorBoard (images only, one
series per prompt index). With EMA on they use the EMA weights, and
with `non_ema_sampling` the live weights as well (file names and events marked 'no-ema').
Sampling leaves the training noise as it was. The trainer reads the logged losses first (a NaN
loss stops the run before its weights are used)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..data.video import write_frames, write_video
from ..fsutil import atomic_write
from .optimizers import optimizer_eval_mode, optimizer_train_mode

if TYPE_CHECKING:
    from .run_state import RunState


def sample_during_training(run: RunState) -> None:
    """Sample every enabled prompt of the run's config (the main process only)."""
    samples = [s for s in run.config.samples if s.enabled]
    if not samples or not run.dist.is_main:
        return
    run.report.status("sampling", "")
    optimizer_eval_mode(run.optimizer)  # schedule-free: sample the averaged weights
    run.paths.samples.mkdir(parents=True, exist_ok=True)
    if run.ema is None:
        _sample_all(run, samples, None)
    else:
        with run.ema.applied(run.trained_params):
            _sample_all(run, samples, True)
        if run.config.non_ema_sampling:
            _sample_all(run, samples, False)
    optimizer_train_mode(run.optimizer)
    run.report.status("training", "")


def _sample_all(run: RunState, samples: list, ema: bool | None) -> None:
    fmt = str(run.config.sample_image_format).lower().replace("jpeg", "jpg")
    suffix = "-no-ema" if ema is False else ""
    fps = float(run.config.frame_rate)  # a clip plays at the rate its training frames were taken
    sequence = {"PNG_IMAGE_SEQUENCE": "png", "JPG_IMAGE_SEQUENCE": "jpg"}.get(str(run.config.sample_video_format))

    def text(prompt: str) -> str:  # as the model reads it (the method's hook: embedding placeholders)
        return run.method.transform_text(prompt) if prompt else prompt

    for i, s in enumerate(samples):
        seed = random.randint(0, 2**31 - 1) if s.random_seed else s.seed
        state = torch.get_rng_state()
        image = run.method.sample_image(run.model, s, text, seed, run.device)  # the family's sample, or the method's own
        torch.set_rng_state(state)  # sampling must not change the training noise
        c = run.counters
        clip = isinstance(image, list)  # a video family's sample: its frames, an .mp4 or a folder of frames
        name = f"step{c.global_step:06d}-epoch{c.epoch}-{i}{suffix}"
        out = run.paths.samples / f"{name}.{'mp4' if clip else fmt}"
        if clip and sequence:
            out = write_frames(image, run.paths.samples / name, sequence)  # the event shows the first frame
        elif clip:
            atomic_write(out, lambda tmp, frames=image: write_video(frames, tmp, fps), what="a sample")
        else:
            atomic_write(out, lambda tmp, im=image: im.save(tmp, format="JPEG" if fmt == "jpg" else fmt.upper()), what="a sample")
        extra = {} if ema is None else {"ema": ema}
        run.report.sample(path=str(out), prompt=s.prompt, step=c.global_step, epoch=c.epoch, index=i, **extra)
        if run.tensorboard is not None and run.config.samples_to_tensorboard and not clip:  # as OneTrainer: images only
            run.tensorboard.add_image(f"sample/{i}{suffix}", np.asarray(image), c.global_step, dataformats="HWC")
