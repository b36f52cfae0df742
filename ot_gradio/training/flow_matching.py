"""The training objective of the flow-matching families (Flux, Chroma, SD 3, and the LLM-encoder
families after them), shared by all of them; a family only declares its facts (flow_contract in
models/base.py).

- t in (0, 1] is the fraction of noise: the noisy input is `(1 - t) * latents + t * noise` and the
  model predicts the velocity `noise - latents`.
- t is drawn as OneTrainer draws it: a timestep index i in [0, 1000) from `timestep_distribution`
  inside the noising-strength range, then shifted (the same code as the DDPM families, noise.py), then
  t = (i + 1) / 1000, the sigmas of diffusers' FlowMatchEulerDiscreteScheduler at shift 1.
- Shift s moves t towards noise: t -> s t / (1 + (s - 1) t). `timestep_shift` is one such shift;
  `dynamic_timestep_shifting` uses the resolution-dependent one of Flux and SD 3 instead: mu grows
  linearly with the image's token count from `base_shift` at `base_image_seq_len` to `max_shift`
  at `max_image_seq_len` (the scheduler config's values), and s = e^mu; `timestep_shift` is then
  not used, as in OneTrainer (its tooltip: "Timestep Shift is ignored").
- A model that trains part of the noise range (`timestep_range`: Wan 2.2 A14B's expert, the
  range diffusion-pipe's min_t / max_t and musubi-tuner's min / max timestep give one expert)
  gets the drawn t mapped linearly into it, so the distribution keeps its shape; t stays below
  an upper bound under 1 (from there the other expert takes over).
- Loss weights: CONSTANT, or SIGMA (the loss times t, as OneTrainer does). The SNR-based ones
  (P2, MIN_SNR_GAMMA, DEBIASED_ESTIMATION), generalized offset noise (built from DDPM betas) and
  the prediction-type and zero-terminal-SNR options have no meaning here and are refused before
  the run starts (config/flow_options.py, read by the doctor and by `configure_model`), never
  silently ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ..config.enums import LossWeight
from .noise import make_noise, noise_options, sample_timesteps

NUM_TRAIN_TIMESTEPS = 1000


def resolution_shift(image_seq_len: int, scheduler_config: Mapping[str, Any]) -> float:
    """e^mu of diffusers' `calculate_shift` for this many image tokens (Flux, SD 3)."""
    base_len = scheduler_config.get("base_image_seq_len", 256)
    max_len = scheduler_config.get("max_image_seq_len", 4096)
    base_shift = scheduler_config.get("base_shift", 0.5)
    max_shift = scheduler_config.get("max_shift", 1.15)
    slope = (max_shift - base_shift) / (max_len - base_len)
    mu = image_seq_len * slope + (base_shift - slope * base_len)
    return math.exp(mu)


def shift_t(t: torch.Tensor, shift: float) -> torch.Tensor:
    return shift * t / (1 + (shift - 1) * t)


def t_from_index(index: torch.Tensor, num_train_timesteps: int = NUM_TRAIN_TIMESTEPS) -> torch.Tensor:
    return (index.float() + 1) / num_train_timesteps


def in_range(t: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """t in (0, 1] mapped linearly into [low, high), or into (low, 1] where high is 1."""
    if (low, high) == (0.0, 1.0):
        return t
    t = low + (high - low) * t
    return t if high >= 1.0 else t.clamp(max=high - 1e-4)


class FlowMatchingSchedule:
    """Timesteps, noisy input, target and loss weights of a flow-matching family."""

    kind = "flow_matching"

    def __init__(self, model: Any, config: Any, device: torch.device):
        self.model = model
        self.config = config
        self.device = device
        self.scheduler_config = dict(model.noise_scheduler.config)

    def shift(self, latents: torch.Tensor) -> float:
        if self.config.dynamic_timestep_shifting:  # instead of timestep_shift, as OneTrainer
            own = self.model.resolution_shift(latents)
            return own if own is not None else resolution_shift(self.model.image_seq_len(latents), self.scheduler_config)
        return float(self.config.timestep_shift)

    def draw_timesteps(self, latents: torch.Tensor, count: int) -> torch.Tensor:
        c = self.config
        index = sample_timesteps(
            count, NUM_TRAIN_TIMESTEPS, distribution=c.timestep_distribution, min_strength=c.min_noising_strength,
            max_strength=c.max_noising_strength, weight=c.noising_weight, bias=c.noising_bias,
            shift=self.shift(latents), device=self.device,
        )
        return in_range(t_from_index(index), *self.model.timestep_range)

    def from_fixed(self, timesteps: torch.Tensor) -> torch.Tensor:
        """Tests fix timesteps as indices in [0, 1000); floats are taken as t already."""
        if timesteps.is_floating_point():
            return timesteps.to(self.device)
        return t_from_index(timesteps.to(self.device))

    def make_noise(self, like: torch.Tensor, t: torch.Tensor, offset_add: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return make_noise(like, t, offset_add=offset_add, **noise_options(self.config, flow_matching=True))

    @staticmethod
    def _view(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return t.to(like.device, like.dtype).view(-1, *([1] * (like.ndim - 1)))

    def noisy(self, latents: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        tt = self._view(t, latents)
        return (1 - tt) * latents + tt * noise

    def target(self, latents: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return noise - latents

    def loss_weights(self, t: torch.Tensor) -> torch.Tensor | None:
        if LossWeight(self.config.loss_weight_fn) == LossWeight.SIGMA:
            return t.float()
        return None
