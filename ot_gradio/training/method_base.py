"""The training method's contract and its registry: each method module (lora_method,
finetune_method, embedding_method, vae_method) registers its class here; training/methods.py
picks one.

A method decides which weights train and how the result is saved; by default its steps are the
diffusion objective's (a method that trains something else, as FINE_TUNE_VAE, gives its own step,
the parts it runs and its samples). The trainer knows none of them by name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import torch

from ..config.enums import TrainingMethod
from ..config.families import family_info
from ..config.prior import base_model_fields
from .param_groups import ParamGroup


class Method:
    """A training method: what trains and how the result is written. Subclasses write the four
    steps; the hooks default to doing nothing, so the trainer calls them on every method."""

    embeddings: Any = None  # the method's embeddings (embeddings.Embeddings), if it has any
    # the step reads each batch's images (FINE_TUNE_VAE), so the dataset gives pixels, not cached latents
    needs_pixels = False
    # the model parts its training step runs, when not the usual ones (placement.py parks the others)
    step_parts: tuple[str, ...] | None = None

    def setup(self, model: Any, config: Any, device: torch.device) -> list[ParamGroup]:
        """Freeze what does not train, add what does; the optimizer's parameter groups."""
        raise NotImplementedError

    def trainable_state(self, model: Any) -> dict[str, torch.Tensor]:
        """The trained weights, for backups."""
        raise NotImplementedError

    def load_trainable_state(self, model: Any, state: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def save(self, model: Any, config: Any, path: Path, metadata: dict[str, str]) -> Path:
        """Write the result in the config's output format; return the written path."""
        raise NotImplementedError

    def training_step(self, model: Any, config: Any, device: torch.device, precision: Any,
                      noise_fn: Any = None, dist: Any = None) -> Any:
        """What turns a batch into the loss (`loss(batch, trained_text_parts)`): the diffusion
        objective (diffusion.DiffusionStep) unless the method trains something else."""
        from .diffusion import DiffusionStep  # noqa: PLC0415

        prior = None
        if fields := base_model_fields(config):  # masked prior preservation, PRIOR_PREDICTION concepts
            prior = self.base_model(model)
            if prior is None:
                raise ValueError(f"{fields[0]}: the {config.training_method.value} method has no base model to predict with "
                                 "(LORA has: the LoRA turned off); train a LORA, or turn the option off")
        return DiffusionStep(model, config, device, precision, noise_fn, caption_transform=self.transform_text, dist=dist,
                             prior_model=prior)

    def base_model(self, model: Any) -> Callable[[], AbstractContextManager] | None:
        """What makes `model` predict as the base model, without what this method trains (a new
        context each call); None: the method has none (masked prior preservation needs one)."""
        return None

    def sample_image(self, model: Any, sample: Any, text: Any, seed: int, device: torch.device) -> Any:
        """One sample of the config as a PIL image (`text`: the prompt as the model reads it). The
        prompt's padding tokens are zeroed with the sample's transformer_attention_mask, or when the
        run trains with them zeroed (OneTrainer's samples take the training setting)."""
        info = family_info(getattr(model, "model_type", None))  # (a stand-in model in tests has none)
        zeroes = sample.transformer_attention_mask and info is not None and info.zeroes_padding
        inpaints = info is not None and info.inpainting  # elsewhere sample_inpainting is ignored, as OneTrainer ignores it
        with padding_zeroed(model, zeroes), clip_length(model, sample.frames):
            return model.sample(prompt=text(sample.prompt), negative_prompt=text(sample.negative_prompt), height=sample.height,
                                width=sample.width, steps=sample.diffusion_steps, cfg_scale=sample.cfg_scale, seed=seed,
                                sampler=sample.noise_scheduler, device=device, **sample_images(sample, inpaints))

    def transform_text(self, text: str) -> str:
        """Captions and sample prompts before tokenizing (embeddings: placeholders -> their tokens)."""
        return text

    def after_optimizer_step(self, model: Any) -> None:
        """After every optimizer step (embeddings: preserve_embedding_norm)."""


@contextmanager
def padding_zeroed(model: Any, on: bool) -> Iterator[None]:
    """A sample's transformer_attention_mask on a family that reads it: the prompt's padding tokens
    are zeroed while it samples, then the run's setting is back. Off: the run's setting as it is."""
    if not on:
        yield
        return
    trained, model.mask_padding_tokens = model.mask_padding_tokens, True
    try:
        yield
    finally:
        model.mask_padding_tokens = trained


@contextmanager
def clip_length(model: Any, frames: int) -> Iterator[None]:
    """A video family's sample of `frames` frames (the family cuts it to frame_step * k + 1) while
    it samples, then the run's length again; 1 (OneTrainer's default) keeps the run's Frames. An
    image family has no clip length."""
    if int(frames) <= 1 or not hasattr(model, "sample_frames"):
        yield
        return
    run_frames, model.sample_frames = model.sample_frames, int(frames)
    try:
        yield
    finally:
        model.sample_frames = run_frames


def sample_images(sample: Any, inpaints: bool = True) -> dict[str, str]:
    """An inpainting sample's base image and mask for an inpainting family's `sample` (the doctor
    checked the files before the run), an editing sample's control image; none for a text-to-image
    sample."""
    images = {"control_image": sample.control_image} if sample.control_image else {}
    if not (sample.sample_inpainting and inpaints):
        return images
    return {"image": sample.base_image_path, "mask": sample.mask_image_path, **images}


METHODS: dict[TrainingMethod, type] = {}


def register(name: TrainingMethod):
    def wrap(cls: type) -> type:
        METHODS[name] = cls
        return cls

    return wrap
