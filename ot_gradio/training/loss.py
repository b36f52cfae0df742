"""The training loss: MSE and MAE with their strengths, per-sample weights, optional mask."""

from __future__ import annotations

import torch


def diffusion_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    *,
    mse_strength: float = 1.0,
    mae_strength: float = 0.0,
    sample_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean over the batch of each sample's weighted loss. Computed in float32."""
    pred = pred.float()
    target = target.float()
    per_sample = torch.zeros(pred.shape[0], device=pred.device)
    dims = tuple(range(1, pred.ndim))
    if mse_strength:
        per_sample = per_sample + mse_strength * (pred - target).pow(2).mean(dim=dims)
    if mae_strength:
        per_sample = per_sample + mae_strength * (pred - target).abs().mean(dim=dims)
    if sample_weights is not None:
        per_sample = per_sample * sample_weights.to(per_sample.device, per_sample.dtype)
    return per_sample.mean()
