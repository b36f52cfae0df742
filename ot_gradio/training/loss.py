"""The training loss, as OneTrainer computes it (ModelSetupDiffusionLossMixin).

Per element: `mse_strength` x squared error + `mae_strength` x absolute error + `huber_strength`
x Huber (quadratic below `huber_delta`, linear above) + `log_cosh_strength` x log(cosh(error)).
All strengths may be combined; all are computed in float32.

Masked training multiplies each element by the latent mask clamped to [unmasked_weight, 1], so
a black mask pixel still counts `unmasked_weight` (0 = not at all); `normalize_masked_area_loss`
divides by the mean of that clamped mask, so a small mask is not learnt more weakly than a big
one.

`masked_prior_preservation_weight` (LoRA): outside the mask the prediction is also pulled towards
the base model's (the LoRA turned off): the same loss against that prediction, times
(1 - the clamped mask) and the weight, normalized by the mean of (1 - the clamped mask) with
`normalize_masked_area_loss`, as OneTrainer's masked_losses_with_prior (a sample with no
outside area gets no such term).

Then per sample: the mean over its elements, times its concept's loss weight, times the timestep
weight of `loss_weight_fn` (SNR = alphas_cumprod / (1 - alphas_cumprod) of the scheduler the model
trains with, so forced v-prediction and zero terminal SNR are taken into account):

- CONSTANT: 1.
- MIN_SNR_GAMMA (Hang et al. 2023): min(SNR, gamma) / SNR for epsilon, min(SNR, gamma) / (SNR + 1)
  for v-prediction; gamma = `loss_weight_strength`.
- P2 (Choi et al. 2022) with k = 1 as in OneTrainer: (1 + SNR)^-gamma, gamma =
  `loss_weight_strength`; SNR + 1 replaces SNR for v-prediction.
- DEBIASED_ESTIMATION (Yu et al. 2023): 1 / sqrt(SNR) (SNR + 1 for v-prediction), SNR clipped at
  1000 as kohya and OneTrainer do.
- SIGMA: flow-matching models only; refused here.

A step's loss is then multiplied by `loss_scale` (`loss_scaler`), as OneTrainer multiplies it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..config.enums import LossScaler, LossWeight

_TINY_SNR = 1e-8  # zero terminal SNR makes the last SNR exactly 0


def elementwise_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    *,
    mse_strength: float = 1.0,
    mae_strength: float = 0.0,
    huber_strength: float = 0.0,
    huber_delta: float = 1.0,
    log_cosh_strength: float = 0.0,
) -> torch.Tensor:
    pred = pred.float()
    target = target.float()
    loss = torch.zeros_like(pred)
    if mse_strength:
        loss = loss + mse_strength * F.mse_loss(pred, target, reduction="none")
    if mae_strength:
        loss = loss + mae_strength * F.l1_loss(pred, target, reduction="none")
    if huber_strength:
        loss = loss + huber_strength * F.huber_loss(pred, target, reduction="none", delta=huber_delta)
    if log_cosh_strength:
        diff = pred - target
        loss = loss + log_cosh_strength * (diff + F.softplus(-2.0 * diff) - torch.log(torch.tensor(2.0, device=diff.device)))
    return loss


def apply_mask(loss: torch.Tensor, mask: torch.Tensor, unmasked_weight: float, normalize: bool) -> torch.Tensor:
    """`mask`: [B, 1, h, w] in [0, 1] at the loss's spatial size."""
    clamped = torch.clamp(mask.to(loss.device, loss.dtype), unmasked_weight, 1.0)
    loss = loss * clamped
    if normalize:
        loss = loss / clamped.mean(dim=tuple(range(1, clamped.ndim)), keepdim=True)
    return loss


def prior_preservation(loss: torch.Tensor, mask: torch.Tensor, unmasked_weight: float, normalize: bool, weight: float) -> torch.Tensor:
    """The loss to the base model's prediction, counted where `apply_mask` does not: times
    (1 - the clamped mask) and `weight`."""
    outside = 1.0 - torch.clamp(mask.to(loss.device, loss.dtype), unmasked_weight, 1.0)
    loss = loss * outside * weight
    if normalize:  # where nothing is outside, the loss is already 0
        loss = loss / outside.mean(dim=tuple(range(1, outside.ndim)), keepdim=True).clamp(min=1e-8)
    return loss


def signal_to_noise(alphas_cumprod: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
    ac = alphas_cumprod.to(torch.float64).to(timesteps.device)[timesteps.long()]
    return (ac / (1.0 - ac)).float()


def timestep_loss_weight(
    fn: LossWeight,
    timesteps: torch.Tensor,
    alphas_cumprod: torch.Tensor,
    *,
    strength: float = 5.0,
    v_prediction: bool = False,
) -> torch.Tensor | None:
    """Per-sample weights of `loss_weight_fn`, or None for CONSTANT."""
    fn = LossWeight(fn)
    if fn == LossWeight.CONSTANT:
        return None
    snr = signal_to_noise(alphas_cumprod, timesteps)
    if fn == LossWeight.MIN_SNR_GAMMA:
        if v_prediction:
            return torch.clamp(snr, max=strength) / (snr + 1.0)
        return torch.clamp(strength / snr.clamp(min=_TINY_SNR), max=1.0)  # = min(SNR, gamma) / SNR
    if fn == LossWeight.P2:
        return (1.0 + (snr + 1.0 if v_prediction else snr)) ** -strength
    if fn == LossWeight.DEBIASED_ESTIMATION:
        weight = torch.clamp(snr, max=1.0e3)
        weight = weight + 1.0 if v_prediction else weight.clamp(min=_TINY_SNR)
        return torch.rsqrt(weight)
    raise ValueError(f"loss_weight_fn: {fn.value} is for flow-matching models; use CONSTANT, P2, MIN_SNR_GAMMA or DEBIASED_ESTIMATION")


def loss_scale(config: Any, processes: int = 1) -> int:
    """`loss_scaler`: what a step's loss is multiplied by, as OneTrainer scales it (the batch size
    per process, the accumulation steps or both; GLOBAL_* also the processes)."""
    return LossScaler(config.loss_scaler).scale(config.batch_size, config.gradient_accumulation_steps, processes)


def diffusion_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    *,
    mse_strength: float = 1.0,
    mae_strength: float = 0.0,
    huber_strength: float = 0.0,
    huber_delta: float = 1.0,
    log_cosh_strength: float = 0.0,
    sample_weights: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    unmasked_weight: float = 0.1,
    normalize_masked_area_loss: bool = False,
    timestep_weights: torch.Tensor | None = None,
    extra_loss: torch.Tensor | None = None,
    prior: torch.Tensor | None = None,
    prior_weight: float = 0.0,
) -> torch.Tensor:
    """Mean over the batch of each sample's weighted loss. Computed in float32. `extra_loss` is
    a per-element term shaped like `pred` (the variational bound of models that learn their
    variance), masked and weighted like the rest, as OneTrainer adds it. `prior`: the base
    model's prediction, which the prediction is pulled towards outside the mask with
    `prior_weight` (masked prior preservation; needs `mask`)."""
    strengths = dict(mse_strength=mse_strength, mae_strength=mae_strength, huber_strength=huber_strength, huber_delta=huber_delta,
                     log_cosh_strength=log_cosh_strength)
    loss = elementwise_loss(pred, target, **strengths)
    if extra_loss is not None:
        loss = loss + extra_loss.float()
    if mask is not None:
        loss = apply_mask(loss, mask, unmasked_weight, normalize_masked_area_loss)
        if prior is not None and prior_weight:
            loss = loss + prior_preservation(elementwise_loss(pred, prior.detach(), **strengths), mask, unmasked_weight,
                                             normalize_masked_area_loss, prior_weight)
    per_sample = loss.mean(dim=tuple(range(1, loss.ndim)))
    if sample_weights is not None:
        per_sample = per_sample * sample_weights.to(per_sample.device, per_sample.dtype)
    if timestep_weights is not None:
        per_sample = per_sample * timestep_weights.to(per_sample.device, per_sample.dtype)
    return per_sample.mean()
