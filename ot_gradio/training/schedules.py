"""The noise-schedule seam: how a family's training step draws timesteps, noises latents, and
what the model is trained to predict. The family names its kind (`schedule_kind`, default
"ddpm"); the step (diffusion.py) only talks to the schedule object.

- DdpmSchedule: the SD / SDXL / PixArt / Würstchen / Cascade objective: integer timesteps of the
  model's noise scheduler, the family's `add_noise` and `prediction_target` (epsilon or v),
  SNR-based loss weights, generalized offset noise from its betas.
- FlowMatchingSchedule (flow_matching.py): Flux, Chroma, SD 3 and the families after them.
"""

from __future__ import annotations

from typing import Any

import torch

from .flow_matching import FlowMatchingSchedule
from .loss import timestep_loss_weight
from .noise import make_noise, noise_options, offset_noise_psi, sample_timesteps


class DdpmSchedule:
    kind = "ddpm"

    def __init__(self, model: Any, config: Any, device: torch.device):
        self.model = model
        self.config = config
        self.device = device
        scheduler = model.noise_scheduler
        self.num_train_timesteps = scheduler.config.num_train_timesteps
        self.alphas_cumprod = scheduler.alphas_cumprod.detach().float().cpu()
        self.betas = scheduler.betas
        self.psi = None
        if config.generalized_offset_noise and config.offset_noise_weight > 0:
            self.psi = offset_noise_psi(scheduler.betas)

    def draw_timesteps(self, latents: torch.Tensor, count: int) -> torch.Tensor:
        c = self.config
        return sample_timesteps(
            count, self.num_train_timesteps, distribution=c.timestep_distribution, min_strength=c.min_noising_strength,
            max_strength=c.max_noising_strength, weight=c.noising_weight, bias=c.noising_bias,
            shift=c.timestep_shift, device=self.device,
        )

    def from_fixed(self, timesteps: torch.Tensor) -> torch.Tensor:
        return timesteps.to(self.device).long()

    def make_noise(self, like: torch.Tensor, timesteps: torch.Tensor,
                   offset_add: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return make_noise(like, timesteps, offset_add=offset_add, psi=self.psi, **noise_options(self.config))

    def noisy(self, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        return self.model.add_noise(latents, noise, timesteps)

    def target(self, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        return self.model.prediction_target(latents, noise, timesteps)

    def loss_weights(self, timesteps: torch.Tensor) -> torch.Tensor | None:
        c = self.config
        return timestep_loss_weight(
            c.loss_weight_fn, timesteps, self.alphas_cumprod, strength=c.loss_weight_strength,
            v_prediction=self.model.prediction_type == "v_prediction",
        )


SCHEDULES = {DdpmSchedule.kind: DdpmSchedule, FlowMatchingSchedule.kind: FlowMatchingSchedule}


def schedule_kind(model_or_class: Any) -> str:
    return getattr(model_or_class, "schedule_kind", DdpmSchedule.kind)


def make_schedule(model: Any, config: Any, device: torch.device) -> DdpmSchedule | FlowMatchingSchedule:
    return SCHEDULES[schedule_kind(model)](model, config, device)
