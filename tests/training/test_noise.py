"""Timestep distributions and training noise (noise.py) against OneTrainer's definitions."""

import math

import pytest
import torch

from ot_gradio.config.enums import TimestepDistribution as TD
from ot_gradio.training.noise import discrete_weights, make_noise, multires_noise, offset_noise_psi, sample_timesteps

N = 20_000


def draw(distribution, **kw):
    g = torch.Generator().manual_seed(0)
    return sample_timesteps(N, 1000, distribution=distribution, generator=g, **kw)


@pytest.mark.parametrize("distribution", list(TD))
def test_every_distribution_stays_inside_the_noising_strengths(distribution):
    t = draw(distribution, min_strength=0.2, max_strength=0.6, weight=1.0, bias=0.1, shift=1.0)
    assert t.shape == (N,) and t.dtype == torch.long
    assert int(t.min()) >= 200 and int(t.max()) <= 599
    assert len(torch.unique(t)) > 100  # spread out, not collapsed


def test_a_shift_moves_the_draws_past_the_noising_strengths_as_onetrainer():
    """OneTrainer bounds the draw by the noising strengths, then shifts it (unclamped): UNIFORM up
    to 0.5 with shift 3 reaches 0.75, t -> 3t / (2t/1000 + 1) of a flat draw. Clamping back into the
    range put every shifted draw past 0.5 (half of them) on timestep 499."""
    t = draw(TD.UNIFORM, max_strength=0.5, shift=3.0).float()
    assert int(t.max()) == pytest.approx(749, abs=2)
    assert (t == 499).float().mean().item() < 0.01
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(1)) * 500
    assert t.mean().item() == pytest.approx((3 * u / (2 * u / 1000 + 1)).mean().item(), abs=6)
    low = draw(TD.LOGIT_NORMAL, min_strength=0.5, shift=0.3)
    assert int(low.min()) < 300  # shifted towards less noise below the lowest strength, as there


def test_uniform_is_flat_over_the_range():
    t = draw(TD.UNIFORM, min_strength=0.0, max_strength=1.0).float()
    assert t.mean().item() == pytest.approx(499.5, abs=8)
    assert int(t.min()) == 0 and int(t.max()) == 999


def test_logit_normal_centre_and_spread_follow_bias_and_weight():
    centred = draw(TD.LOGIT_NORMAL).float()
    assert centred.mean().item() == pytest.approx(500, abs=8)
    # sigmoid(N(0, 1)) has std ~0.21 of the range; weight 1 -> std 2 spreads it towards the ends
    assert centred.std().item() == pytest.approx(1000 * 0.2083, rel=0.05)
    assert draw(TD.LOGIT_NORMAL, weight=1.0).float().std().item() > centred.std().item() + 50
    noisier = draw(TD.LOGIT_NORMAL, bias=1.0).float().mean().item()
    assert noisier == pytest.approx(1000 * 0.7, abs=20)  # E[sigmoid(N(1, 1))] ~ 0.70


def middle(t):
    return ((t > 250) & (t < 750)).float().mean().item()


def test_heavy_tail_weight_moves_mass_between_middle_and_ends():
    uniform = draw(TD.HEAVY_TAIL, weight=0.0).float()
    assert uniform.mean().item() == pytest.approx(500, abs=10)
    assert middle(uniform) == pytest.approx(0.5, abs=0.02)
    assert middle(draw(TD.HEAVY_TAIL, weight=0.8).float()) > 0.6  # SD3's "mode" sampling: s > 0 favours the middle
    assert middle(draw(TD.HEAVY_TAIL, weight=-0.8).float()) < 0.4  # s < 0 the ends (heavy tails)


@pytest.mark.parametrize(("alpha", "beta"), [(0.5, 1.0), (1.0, 3.0), (2.0, 5.0)])
def test_beta_follows_its_alpha_and_beta_as_onetrainers_b_ttdm(alpha, beta):
    """BETA: noising weight = alpha, noising bias = beta; the mean is alpha / (alpha + beta), and a
    run's draws repeat with its seed (the general case too, leaving the global random state)."""
    t = draw(TD.BETA, weight=alpha, bias=beta).float() / 1000
    assert t.mean().item() == pytest.approx(alpha / (alpha + beta), abs=0.01)
    variance = alpha * beta / ((alpha + beta) ** 2 * (alpha + beta + 1))
    assert t.var().item() == pytest.approx(variance, rel=0.08)
    state = torch.get_rng_state()
    assert torch.equal(draw(TD.BETA, weight=alpha, bias=beta), draw(TD.BETA, weight=alpha, bias=beta))
    assert torch.equal(torch.get_rng_state(), state)


def test_cos_map_matches_its_density():
    w = discrete_weights(TD.COS_MAP, 1000, 0.0, 0.0, 1.0)
    x = torch.linspace(0, 1, 1000)
    expected = 2.0 / (math.pi * (1 - 2 * x + 2 * x**2))
    assert torch.allclose(w, expected, rtol=1e-5)
    t = draw(TD.COS_MAP).float()
    assert t.mean().item() == pytest.approx(500, abs=10)  # symmetric, twice as dense in the middle as at the ends
    assert middle(t) == pytest.approx(float(w[251:750].sum() / w.sum()), abs=0.02)
    assert middle(t) > 0.55


def test_sigmoid_weight_sign_picks_high_or_low_noise():
    assert draw(TD.SIGMOID, weight=8.0).float().mean().item() > 650
    assert draw(TD.SIGMOID, weight=-8.0).float().mean().item() < 350
    assert draw(TD.SIGMOID, weight=8.0, bias=0.3).float().mean().item() > draw(TD.SIGMOID, weight=8.0).float().mean().item()


def test_inverted_parabola_is_a_bump_at_bias_plus_half():
    w = discrete_weights(TD.INVERTED_PARABOLA, 1001, 4.0, 0.0, 1.0)
    assert int(w.argmax()) == 500 and w[0].item() == pytest.approx(1.0) and w[500].item() == pytest.approx(2.0)
    t = draw(TD.INVERTED_PARABOLA, weight=8.0, bias=-0.2).float()
    w = discrete_weights(TD.INVERTED_PARABOLA, 1000, 8.0, -0.2, 1.0)
    assert t.mean().item() == pytest.approx(float((w * torch.arange(1000)).sum() / w.sum()), abs=8)
    assert int(t.max()) <= 800  # 2 - 8 (x - 0.3)^2 reaches 0 at x = 0.8


@pytest.mark.parametrize("distribution", [TD.UNIFORM, TD.COS_MAP, TD.LOGIT_NORMAL])
def test_timestep_shift_moves_towards_more_noise(distribution):
    plain = draw(distribution).float().mean().item()
    assert draw(distribution, shift=3.0).float().mean().item() > plain + 100
    assert draw(distribution, shift=0.33).float().mean().item() < plain - 100


def test_uniform_shift_is_onetrainers_formula():
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    t = sample_timesteps(64, 1000, shift=2.0, generator=g1)
    u = 1000 * torch.rand(64, generator=g2)
    assert torch.equal(t, (1000 * 2.0 * u / (u + 1000)).long())


def test_min_equal_max_still_gives_a_timestep():
    t = sample_timesteps(8, 1000, min_strength=0.5, max_strength=0.5)
    assert torch.equal(t, torch.full((8,), 500))


def test_impossible_parabola_is_refused():
    with pytest.raises(ValueError, match="noising_weight"):
        discrete_weights(TD.INVERTED_PARABOLA, 10, 1e6, 5.0, 1.0)


def _betas():
    """SD's scaled-linear schedule."""
    return torch.linspace(0.00085**0.5, 0.012**0.5, 1000, dtype=torch.float32) ** 2


def test_offset_noise_is_constant_per_channel():
    torch.manual_seed(0)
    latents = torch.zeros(2, 4, 8, 8)
    torch.manual_seed(1)
    base, _ = make_noise(latents, torch.tensor([10, 900]))
    torch.manual_seed(1)
    noisy, target = make_noise(latents, torch.tensor([10, 900]), offset_weight=0.5)
    offset = noisy - base
    assert offset.abs().sum() > 0 and torch.equal(noisy, target)
    assert torch.allclose(offset, offset[:, :, :1, :1].expand_as(offset))


def test_generalized_offset_noise_scales_the_offset_by_psi_t():
    psi = offset_noise_psi(_betas())
    assert psi.shape == (1000,) and torch.isfinite(psi).all() and (psi > 0).all()
    assert psi[-1].item() == pytest.approx(1.0, rel=1e-6)  # normalised at t = T
    latents = torch.zeros(2, 4, 8, 8)
    t = torch.tensor([10, 900])
    torch.manual_seed(1)
    base, _ = make_noise(latents, t)
    torch.manual_seed(1)
    plain, _ = make_noise(latents, t, offset_weight=0.5)
    torch.manual_seed(1)
    general, _ = make_noise(latents, t, offset_weight=0.5, generalized_offset=True, psi=psi)
    ratio = (general - base)[:, 0, 0, 0] / (plain - base)[:, 0, 0, 0]
    assert torch.allclose(ratio, psi[t].float(), rtol=1e-3)


def test_perturbation_changes_the_input_noise_only():
    latents = torch.zeros(3, 4, 8, 8)
    torch.manual_seed(2)
    clean, _ = make_noise(latents, torch.tensor([1, 2, 3]))
    torch.manual_seed(2)
    noisy, target = make_noise(latents, torch.tensor([1, 2, 3]), perturbation_weight=0.1)
    assert torch.equal(target, clean)
    diff = noisy - target
    assert diff.std().item() == pytest.approx(0.1, rel=0.15)


def _low_frequency_share(noise):
    """How much of the noise's variance is in each image's per-channel mean (0.016 for white 8x8 noise)."""
    return (noise.mean(dim=(-2, -1)).var() / noise.var()).item()


@pytest.mark.parametrize("shape", [(8, 4, 32, 32), (2, 4, 3, 32, 32)])  # images [B, C, H, W] and video [B, C, F, H, W]
def test_multires_noise_adds_coarse_noise_at_unit_std(shape):
    latents = torch.zeros(shape)
    t = torch.zeros(shape[0], dtype=torch.long)
    torch.manual_seed(3)
    white, _ = make_noise(latents, t)
    torch.manual_seed(3)
    pyramid, target = make_noise(latents, t, multires_iterations=8, multires_discount=0.8)
    assert pyramid.shape == latents.shape and torch.equal(pyramid, target)
    assert pyramid.std().item() == pytest.approx(1.0, abs=1e-4)  # scaled back, as sd-scripts does
    assert _low_frequency_share(white) < 0.01 and _low_frequency_share(pyramid) > 0.05
    # the coarser the noise the more its neighbouring pixels agree
    def neighbours(x):
        return torch.corrcoef(torch.stack([x[..., :, 1:].flatten(), x[..., :, :-1].flatten()]))[0, 1].item()

    assert abs(neighbours(white)) < 0.05 and neighbours(pyramid) > 0.15


def test_multires_discount_weakens_the_coarse_levels_and_zero_iterations_is_off():
    noise = torch.randn(8, 4, 32, 32)
    assert torch.equal(multires_noise(noise, 0, 0.3), noise)
    torch.manual_seed(4)
    weak = multires_noise(noise, 8, 0.1)
    torch.manual_seed(4)
    strong = multires_noise(noise, 8, 0.9)
    assert _low_frequency_share(weak) < _low_frequency_share(strong)


def test_random_strengths_draw_each_steps_strength_below_the_weight():
    latents = torch.zeros(64, 4, 8, 8)
    t = torch.zeros(64, dtype=torch.long)
    offsets, perturbations = [], []
    for seed in range(40):
        torch.manual_seed(seed)
        base, _ = make_noise(latents, t)
        torch.manual_seed(seed)
        noisy, target = make_noise(latents, t, offset_weight=0.5, offset_random=True, perturbation_weight=0.2, perturbation_random=True)
        offset = target - base  # constant per image and channel
        offsets.append((offset[:, :, 0, 0].std() / 0.5).item())
        perturbations.append(((noisy - target).std() / 0.2).item())
    for shares in (offsets, perturbations):  # the drawn strength / the weight: anywhere in (0, 1), not always 1
        assert 0 < min(shares) < 0.3 and 0.7 < max(shares) < 1.25 and 0.3 < sum(shares) / len(shares) < 0.7


def test_adaptive_noise_scale_adds_each_images_mean_to_its_offset():
    from ot_gradio.training.noise import adaptive_offset

    latents = torch.zeros(2, 4, 8, 8)
    latents[1, 2] = -3.0  # one image's third channel far from 0
    add = adaptive_offset(latents, 0.1)
    assert add.shape == (2, 4) and add[1, 2].item() == pytest.approx(0.3) and add[0].abs().sum() == 0
    assert adaptive_offset(latents, 0.0) is None
    t = torch.zeros(2, dtype=torch.long)
    torch.manual_seed(5)
    base, _ = make_noise(latents, t)
    torch.manual_seed(5)
    plain, _ = make_noise(latents, t, offset_weight=0.1)
    torch.manual_seed(5)
    adaptive, _ = make_noise(latents, t, offset_weight=0.1, offset_add=add)
    ratio = (adaptive - base)[:, :, 0, 0] / (plain - base)[:, :, 0, 0]  # the same draw, each strength scaled
    assert ratio[1, 2].item() == pytest.approx(4.0, rel=1e-4) and torch.allclose(ratio[0], torch.ones(4), rtol=1e-4)
    torch.manual_seed(5)
    lowered, _ = make_noise(latents, t, offset_weight=0.1, offset_add=-add * 10)  # never below 0
    assert (lowered - base)[1, 2].abs().max().item() == 0.0
