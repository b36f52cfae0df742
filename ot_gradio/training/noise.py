"""Training noise and timesteps, as OneTrainer draws them (ModelSetupNoiseMixin).

Timesteps come from `timestep_distribution` inside [min_noising_strength, max_noising_strength]
of the scheduler's steps:

- UNIFORM: every timestep equally likely.
- LOGIT_NORMAL: sigmoid of a normal with mean `noising_bias` and std `noising_weight + 1`; the
  middle timesteps are trained most.
- HEAVY_TAIL: u -> 1 - u - w (cos^2(pi u / 2) - 1 + u) with w = `noising_weight`; w = 0 is
  uniform, larger w puts more mass on the ends.
- COS_MAP: density 2 / (pi (1 - 2x + 2x^2)) over x in [0, 1] (more at both ends).
- SIGMOID: density sigmoid(w (x - (b + 0.5))), w = `noising_weight`, b = `noising_bias`;
  w > 0 favours high noise, w < 0 low noise.
- INVERTED_PARABOLA: density max(0, 2 - w (x - (b + 0.5))^2), a bump centred at b + 0.5.
- BETA: a Beta(a, b) draw with a = `noising_weight`, b = `noising_bias` (each at least 1e-4), as
  OneTrainer's B-TTDM: with b = 1 it is u^(1/a), with a = 1 it is 1 - u^(1/b) (u uniform), else
  torch's Beta sampler, seeded from the run's generator (OneTrainer's uses the global seed there).

`timestep_shift` s moves timesteps towards more noise (s > 1) or less (s < 1): the continuous
ones are mapped t -> N s t / ((s - 1) t + N); the discrete densities are sampled at shifted
points and scaled by the shift's derivative, exactly as OneTrainer does (for SIGMOID that applies
the shift twice to the sigmoid's input, also as OneTrainer does). As in OneTrainer, the
noising-strength range bounds the continuous draws before the shift, which then moves them: UNIFORM
up to 0.5 with shift 3 reaches 0.75 (clamping them back into the range piled the shifted part of the
draws onto its last timestep).

Noise: Gaussian, plus `offset_noise_weight` of a per-channel offset (constant over the image);
with `generalized_offset_noise` the offset is scaled per timestep by the psi_t schedule of
"Generalized Diffusion Model with Adjusted Offset Noise" (eq. 34, Algorithm 1), as OneTrainer
does. `multires_noise_iterations` adds multi-resolution (pyramid) noise as kohya's sd-scripts
does: Gaussian noise drawn at that many sizes, the first the latent's own and each next one 2
to 4 times smaller than the last (stopping at one pixel), scaled up bilinearly and weakened by
`multires_noise_discount` per level, then the whole batch's noise is scaled back to unit
standard deviation. kohya's offset options: `offset_noise_random_strength` draws each step's
offset strength between 0 and the weight, `adaptive_noise_scale` adds that times each image's
mean latent value per channel to it. `perturbation_noise_weight` is input perturbation (Ning et al. 2023, "Input Perturbation
Reduces Exposure Bias"): extra Gaussian noise is added to the noisy input only, while the
target keeps the unperturbed noise. (OneTrainer adds it to the noise used for both, which makes
it just stronger noise; we follow the paper.)
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..config.enums import TimestepDistribution

CONTINUOUS = (TimestepDistribution.UNIFORM, TimestepDistribution.LOGIT_NORMAL, TimestepDistribution.HEAVY_TAIL,
              TimestepDistribution.BETA)


def timestep_range(num_train_timesteps: int, min_strength: float, max_strength: float) -> tuple[int, int]:
    """[low, high) of the timesteps trained; never empty."""
    low = int(num_train_timesteps * min_strength)
    high = int(num_train_timesteps * max_strength)
    low = min(low, num_train_timesteps - 1)
    return low, max(high, low + 1)


def discrete_weights(distribution: TimestepDistribution, count: int, weight: float, bias: float, shift: float) -> torch.Tensor:
    """Unnormalised sampling weights of `count` timesteps for the discrete distributions."""
    distribution = TimestepDistribution(distribution)
    x = torch.linspace(0, 1, count, dtype=torch.float64)
    shifted = x / (shift - shift * x + x)
    derivative = shift / (shift + x - x * shift).pow(2)
    if distribution == TimestepDistribution.COS_MAP:
        w = 2.0 / (math.pi - 2.0 * math.pi * shifted + 2.0 * math.pi * shifted**2)
    elif distribution == TimestepDistribution.SIGMOID:
        again = shifted / (shift - shift * shifted + shifted)
        w = torch.sigmoid(weight * (again - (bias + 0.5)))
    elif distribution == TimestepDistribution.INVERTED_PARABOLA:
        w = torch.clamp(-weight * (shifted - (bias + 0.5)) ** 2 + 2, min=0.0)
    else:
        raise ValueError(f"timestep_distribution: {distribution.value} is not a discrete distribution")
    w = w * derivative
    if not torch.isfinite(w).all() or float(w.sum()) <= 0:
        raise ValueError(
            f"timestep_distribution {distribution.value}: noising_weight={weight} and noising_bias={bias} leave no "
            "timestep with a positive weight; lower the weight or move the bias back towards 0"
        )
    return w.float()


def sample_timesteps(
    batch_size: int,
    num_train_timesteps: int,
    *,
    distribution: TimestepDistribution = TimestepDistribution.UNIFORM,
    min_strength: float = 0.0,
    max_strength: float = 1.0,
    weight: float = 0.0,
    bias: float = 0.0,
    shift: float = 1.0,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """`batch_size` training timesteps (long), drawn in [min, max) of the noising strengths and then moved
    by `shift` (so outside that range where the shift is not 1, as OneTrainer)."""
    distribution = TimestepDistribution(distribution)
    low, high = timestep_range(num_train_timesteps, min_strength, max_strength)
    span = high - low
    n = num_train_timesteps
    if distribution in CONTINUOUS:
        if distribution == TimestepDistribution.UNIFORM:
            t = low + span * torch.rand(batch_size, generator=generator)
        elif distribution == TimestepDistribution.LOGIT_NORMAL:
            t = torch.normal(bias, weight + 1.0, size=(batch_size,), generator=generator).sigmoid() * span + low
        elif distribution == TimestepDistribution.BETA:
            t = _beta(batch_size, max(1e-4, weight), max(1e-4, bias), generator) * span + low
        else:
            u = torch.rand(batch_size, generator=generator)
            u = 1.0 - u - weight * (torch.cos(math.pi / 2.0 * u) ** 2.0 - 1.0 + u)
            t = u * span + low
        t = t.clamp(low, high - 1)  # a draw of exactly 1 (sigmoid, u^(1/b)) stays in the range, then the shift moves it
        t = n * shift * t / ((shift - 1) * t + n)
        t = t.long()
    else:
        w = discrete_weights(distribution, span, weight, bias, shift)
        t = torch.multinomial(w, batch_size, replacement=True, generator=generator) + low
    return t.clamp(0, n - 1).to(device)


def _beta(count: int, alpha: float, beta: float, generator: torch.Generator | None) -> torch.Tensor:
    """`count` draws of Beta(alpha, beta) in [0, 1]: by the inverse CDF where one of them is 1
    (OneTrainer's ways), else torch's sampler under a seed drawn from `generator` (the global
    random state is left as it was)."""
    if abs(beta - 1.0) < 1e-5:
        return torch.rand(count, generator=generator, dtype=torch.float64).pow(1.0 / alpha).float()
    if abs(alpha - 1.0) < 1e-5:
        return (1.0 - torch.rand(count, generator=generator, dtype=torch.float64).pow(1.0 / beta)).float()
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.distributions.Beta(torch.tensor(alpha, dtype=torch.float64), torch.tensor(beta, dtype=torch.float64)).sample((count,)).float()


def offset_noise_psi(betas: torch.Tensor) -> torch.Tensor:
    """psi_t of generalized offset noise for every timestep (float64)."""
    betas = betas.to(torch.float64).cpu()
    steps = betas.shape[0]
    alphas = 1.0 - betas
    cumprod = torch.cumprod(alphas, dim=0)
    cumprod_prev = torch.cat([torch.ones(1, dtype=torch.float64), cumprod[:-1]])
    gammas = torch.zeros(steps, dtype=torch.float64)
    gammas[0] = 1.0
    running = gammas[0] / cumprod_prev[0].sqrt()
    for t in range(1, steps):
        c_t = (1 - alphas[t]) * cumprod_prev[t].sqrt() / (alphas[t] * (1 - cumprod_prev[t]))
        gammas[t] = c_t * running
        running = running + gammas[t] / cumprod_prev[t].sqrt()
    gammas = gammas / (running / (1 - cumprod[-1]).sqrt())
    return torch.cumsum(gammas / cumprod_prev.sqrt(), dim=0) / (1 - cumprod).sqrt()


def multires_noise(noise: torch.Tensor, iterations: int, discount: float) -> torch.Tensor:
    """`noise` plus coarser noise at up to `iterations` levels, back at unit standard deviation.
    The last two dimensions are the image's; a video's frames each get their own coarse noise."""
    if iterations <= 0:
        return noise
    shape = noise.shape
    height, width = shape[-2:]
    flat = noise.reshape(shape[0], -1, height, width)  # [B, C(*F), H, W]
    out = flat.clone()
    for level in range(iterations):  # level 0: a second full-size draw, as in sd-scripts
        factor = (2.0 + 2.0 * torch.rand(()).item()) ** level
        h, w = max(1, int(height / factor)), max(1, int(width / factor))
        coarse = torch.randn(flat.shape[0], flat.shape[1], h, w, device=noise.device, dtype=torch.float32)
        up = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)
        out = out + up.to(out.dtype) * discount**level
        if h == 1 or w == 1:
            break
    return (out / out.std()).reshape(shape)


def noise_options(config: Any, flow_matching: bool = False) -> dict[str, Any]:
    """`make_noise`'s settings from a run's config (generalized offset noise: DDPM schedules only)."""
    return {
        "offset_weight": config.offset_noise_weight, "offset_random": config.offset_noise_random_strength,
        "generalized_offset": config.generalized_offset_noise and not flow_matching,
        "multires_iterations": config.multires_noise_iterations, "multires_discount": config.multires_noise_discount,
        "perturbation_weight": config.perturbation_noise_weight, "perturbation_random": config.perturbation_noise_random_strength,
    }


def adaptive_offset(latents: torch.Tensor, scale: float) -> torch.Tensor | None:
    """kohya's adaptive noise scale: `scale` x each image's mean latent value per channel (its
    absolute value) [B, C], added to the offset noise's strength (`make_noise`'s offset_add)."""
    if not scale:
        return None
    return latents.detach().float().mean(dim=tuple(range(2, latents.ndim))).abs() * scale


def make_noise(
    latents: torch.Tensor,
    timesteps: torch.Tensor,
    *,
    offset_weight: float = 0.0,
    offset_random: bool = False,
    offset_add: torch.Tensor | None = None,
    generalized_offset: bool = False,
    multires_iterations: int = 0,
    multires_discount: float = 0.3,
    perturbation_weight: float = 0.0,
    perturbation_random: bool = False,
    psi: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(noise added to the latents, noise the target is computed from). `offset_random` /
    `perturbation_random`: the step's strength is drawn between 0 and the weight (kohya's
    noise_offset_random_strength / ip_noise_gamma_random_strength); `offset_add` [B, C]: added to
    each image's offset strength (`adaptive_offset`), never below 0."""
    noise = torch.randn_like(latents)
    if offset_weight > 0:
        offset = torch.randn(latents.shape[0], latents.shape[1], *([1] * (latents.ndim - 2)), device=latents.device, dtype=latents.dtype)
        strength = offset_weight * torch.rand(()).item() if offset_random else offset_weight
        if offset_add is not None:
            strength = (strength + offset_add.to(latents.device, latents.dtype)).clamp(min=0)
            offset = offset * strength.view(*strength.shape, *([1] * (latents.ndim - 2)))
        else:
            offset = offset * strength
        if generalized_offset:
            if psi is None:
                raise ValueError("generalized_offset_noise needs the psi schedule of the model's betas")
            scale = psi.to(latents.device)[timesteps.long()].to(latents.dtype)
            offset = offset * scale.view(-1, *([1] * (latents.ndim - 1)))
        noise = noise + offset
    noise = multires_noise(noise, multires_iterations, multires_discount)
    if perturbation_weight > 0:
        strength = perturbation_weight * torch.rand(()).item() if perturbation_random else perturbation_weight
        return noise + strength * torch.randn_like(latents), noise
    return noise, noise
