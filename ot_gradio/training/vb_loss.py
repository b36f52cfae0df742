"""The variational-bound loss of models that learn their variance (IDDPM, Nichol & Dhariwal 2021),
as PixArt-α and OneTrainer train it.

Such a model outputs, besides epsilon, values v in [-1, 1] per latent element that pick the
reverse step's log variance between the posterior's (v = -1) and beta_t (v = 1). The loss is
the KL divergence, in bits, between the true posterior q(x_{t-1} | x_t, x_0) and the model's
p(x_{t-1} | x_t), and at t = 0 the discretized Gaussian negative log-likelihood of x_0. Epsilon
enters detached, so this term trains only the variance (the "hybrid" objective: MSE for the
mean, `vb_loss_strength` x this for the variance).

The posterior log variance at t = 0 (where the posterior variance is 0) takes the value at
t = 1, as IDDPM and PixArt's training code do.
"""

from __future__ import annotations

import math

import torch


class VariationalBound:
    def __init__(self, betas: torch.Tensor):
        betas = betas.detach().double().cpu()
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        prev = torch.cat([torch.ones(1, dtype=torch.float64), alphas_cumprod[:-1]])
        posterior_variance = betas * (1.0 - prev) / (1.0 - alphas_cumprod)
        self.log_betas = torch.log(betas)
        self.posterior_log_variance = torch.log(torch.cat([posterior_variance[1:2], posterior_variance[1:]]))
        self.mean_coef_x0 = betas * torch.sqrt(prev) / (1.0 - alphas_cumprod)
        self.mean_coef_xt = (1.0 - prev) * torch.sqrt(1.0 - betas) / (1.0 - alphas_cumprod)
        self.recip_sqrt_ac = torch.rsqrt(alphas_cumprod)
        self.recipm1_sqrt_ac = torch.sqrt(1.0 / alphas_cumprod - 1.0)

    @staticmethod
    def _at(table: torch.Tensor, t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        values = table.to(like.device)[t.long().to(like.device)].to(like.dtype)
        return values.view(-1, *([1] * (like.ndim - 1)))

    def __call__(
        self,
        x0: torch.Tensor,
        xt: torch.Tensor,
        t: torch.Tensor,
        eps: torch.Tensor,
        variance_values: torch.Tensor,
    ) -> torch.Tensor:
        """Per-element loss in bits, shaped like `x0`; gradients reach `variance_values` only."""
        x0, xt = x0.float(), xt.float()
        eps, v = eps.detach().float(), variance_values.float()
        true_mean = self._at(self.mean_coef_x0, t, x0) * x0 + self._at(self.mean_coef_xt, t, x0) * xt
        true_log_var = self._at(self.posterior_log_variance, t, x0)

        frac = (v + 1.0) / 2.0
        log_var = frac * self._at(self.log_betas, t, x0) + (1.0 - frac) * true_log_var
        x0_pred = self._at(self.recip_sqrt_ac, t, x0) * xt - self._at(self.recipm1_sqrt_ac, t, x0) * eps
        mean = self._at(self.mean_coef_x0, t, x0) * x0_pred + self._at(self.mean_coef_xt, t, x0) * xt

        kl = 0.5 * (-1.0 + log_var - true_log_var + torch.exp(true_log_var - log_var) + (true_mean - mean) ** 2 * torch.exp(-log_var))
        nll = -_discretized_gaussian_log_likelihood(x0, mean, 0.5 * log_var)
        first = (t.long() == 0).to(x0.device).view(-1, *([1] * (x0.ndim - 1)))
        return torch.where(first, nll, kl) / math.log(2.0)


def _standard_normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _discretized_gaussian_log_likelihood(x: torch.Tensor, mean: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """log P(x) of a Gaussian over bins of width 2/255 in [-1, 1] (the edges take the tails)."""
    centered = x - mean
    inv_std = torch.exp(-log_scale)
    cdf_plus = _standard_normal_cdf(inv_std * (centered + 1.0 / 255.0))
    cdf_min = _standard_normal_cdf(inv_std * (centered - 1.0 / 255.0))
    log_cdf_plus = torch.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
    log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
    return torch.where(x < -0.999, log_cdf_plus, torch.where(x > 0.999, log_one_minus_cdf_min, log_delta))
