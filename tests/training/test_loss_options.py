"""Loss functions, timestep loss weights and masked loss (loss.py, masking.py) against formulas."""

import pytest
import torch

from ot_gradio.config.enums import LossWeight
from ot_gradio.training.loss import diffusion_loss, signal_to_noise, timestep_loss_weight
from ot_gradio.training.masking import latent_mask, training_mask

ALPHAS_CUMPROD = torch.cumprod(1 - torch.linspace(0.00085**0.5, 0.012**0.5, 1000) ** 2, dim=0)


def _pair(seed=0, shape=(2, 4, 8, 8)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * 2, torch.randn(shape, generator=g)


def test_each_loss_term_matches_its_formula_and_strengths_add_up():
    pred, target = _pair()
    d = pred - target
    mse, mae = d.pow(2).mean(), d.abs().mean()
    huber = torch.where(d.abs() <= 0.5, 0.5 * d**2, 0.5 * (d.abs() - 0.25)).mean()
    log_cosh = torch.log(torch.cosh(d)).mean()
    assert diffusion_loss(pred, target).item() == pytest.approx(mse.item(), rel=1e-5)
    assert diffusion_loss(pred, target, mse_strength=0, mae_strength=1).item() == pytest.approx(mae.item(), rel=1e-5)
    assert diffusion_loss(pred, target, mse_strength=0, huber_strength=1, huber_delta=0.5).item() == pytest.approx(huber.item(), rel=1e-5)
    assert diffusion_loss(pred, target, mse_strength=0, log_cosh_strength=1).item() == pytest.approx(log_cosh.item(), rel=1e-5)
    mixed = diffusion_loss(pred, target, mse_strength=0.5, mae_strength=2, huber_strength=3, huber_delta=0.5, log_cosh_strength=0.25)
    assert mixed.item() == pytest.approx((0.5 * mse + 2 * mae + 3 * huber + 0.25 * log_cosh).item(), rel=1e-5)


def test_sample_and_timestep_weights_multiply_each_sample():
    pred, target = _pair()
    per = (pred - target).pow(2).mean(dim=(1, 2, 3))
    out = diffusion_loss(pred, target, sample_weights=torch.tensor([1.0, 3.0]), timestep_weights=torch.tensor([0.5, 2.0]))
    assert out.item() == pytest.approx(((per * torch.tensor([0.5, 6.0])).mean()).item(), rel=1e-5)


T = torch.tensor([0, 10, 250, 500, 999])


def _snr():
    ac = ALPHAS_CUMPROD.double()[T]
    return ac / (1 - ac)


def test_constant_weight_is_none():
    assert timestep_loss_weight(LossWeight.CONSTANT, T, ALPHAS_CUMPROD) is None


def test_min_snr_gamma_for_epsilon_and_v_prediction():
    snr = _snr()
    eps = timestep_loss_weight(LossWeight.MIN_SNR_GAMMA, T, ALPHAS_CUMPROD, strength=5.0)
    v = timestep_loss_weight(LossWeight.MIN_SNR_GAMMA, T, ALPHAS_CUMPROD, strength=5.0, v_prediction=True)
    assert torch.allclose(eps.double(), torch.clamp(snr, max=5.0) / snr, rtol=1e-5)
    assert torch.allclose(v.double(), torch.clamp(snr, max=5.0) / (snr + 1), rtol=1e-5)
    assert eps[0].item() < 0.01 and eps[-1].item() == pytest.approx(1.0)  # low noise is damped


def test_p2_uses_the_strength_as_exponent():
    snr = _snr()
    eps = timestep_loss_weight(LossWeight.P2, T, ALPHAS_CUMPROD, strength=0.5)
    v = timestep_loss_weight(LossWeight.P2, T, ALPHAS_CUMPROD, strength=0.5, v_prediction=True)
    assert torch.allclose(eps.double(), (1 + snr) ** -0.5, rtol=1e-5)
    assert torch.allclose(v.double(), (2 + snr) ** -0.5, rtol=1e-5)


def test_debiased_estimation_clips_the_snr_at_1000():
    snr = _snr()
    eps = timestep_loss_weight(LossWeight.DEBIASED_ESTIMATION, T, ALPHAS_CUMPROD)
    v = timestep_loss_weight(LossWeight.DEBIASED_ESTIMATION, T, ALPHAS_CUMPROD, v_prediction=True)
    assert torch.allclose(eps.double(), torch.clamp(snr, max=1000) ** -0.5, rtol=1e-5)
    assert torch.allclose(v.double(), (torch.clamp(snr, max=1000) + 1) ** -0.5, rtol=1e-5)
    assert snr[0] > 1000 and eps[0].item() == pytest.approx(1000**-0.5, rel=1e-5)


def test_weights_stay_finite_with_zero_terminal_snr():
    ac = ALPHAS_CUMPROD.clone()
    ac[-1] = 0.0
    assert signal_to_noise(ac, torch.tensor([999])).item() == 0.0
    for fn in (LossWeight.MIN_SNR_GAMMA, LossWeight.P2, LossWeight.DEBIASED_ESTIMATION):
        for v in (False, True):
            assert torch.isfinite(timestep_loss_weight(fn, T, ac, v_prediction=v)).all(), (fn, v)
    assert timestep_loss_weight(LossWeight.MIN_SNR_GAMMA, torch.tensor([999]), ac).item() == 1.0


def test_sigma_weight_is_refused_for_diffusion_models():
    with pytest.raises(ValueError, match="flow-matching"):
        timestep_loss_weight(LossWeight.SIGMA, T, ALPHAS_CUMPROD)


# --- masked training ---------------------------------------------------------------------------


def _half_mask(size=64):
    """White left half, black right half, at pixel resolution."""
    mask = torch.zeros(2, 1, size, size)
    mask[..., : size // 2] = 1.0
    return mask


def test_mask_is_averaged_down_to_the_latent_grid():
    mask = torch.zeros(1, 1, 64, 64)
    mask[..., :8, :4] = 1.0  # half of the top-left 8x8 patch
    small = latent_mask(mask, (8, 8))
    assert small.shape == (1, 1, 8, 8)
    assert small[0, 0, 0, 0].item() == pytest.approx(0.5) and small.sum().item() == pytest.approx(0.5)


def test_with_unmasked_weight_zero_black_latents_do_not_count():
    pred, target = _pair(shape=(2, 4, 8, 8))
    mask = latent_mask(_half_mask(), (8, 8))
    changed = target.clone()
    changed[..., 4:] += 10.0  # only under the black half
    a = diffusion_loss(pred, target, mask=mask, unmasked_weight=0.0)
    b = diffusion_loss(pred, changed, mask=mask, unmasked_weight=0.0)
    assert a.item() == pytest.approx(b.item(), rel=1e-6)
    pred = pred.clone().requires_grad_(True)
    diffusion_loss(pred, target, mask=mask, unmasked_weight=0.0).backward()
    assert pred.grad[..., 4:].abs().max().item() == 0.0 and pred.grad[..., :4].abs().max().item() > 0
    # the option is not ignored: without the mask, or with some unmasked weight, the change counts
    assert diffusion_loss(pred, changed).item() > a.item() + 1
    assert diffusion_loss(pred, changed, mask=mask, unmasked_weight=0.1).item() > a.item() + 1


def test_unmasked_weight_scales_the_black_area_and_normalizing_divides_by_the_mask_mean():
    pred, target = _pair()
    mask = latent_mask(_half_mask(), (8, 8))
    err = (pred - target).pow(2)
    white, black = err[..., :4].sum() / err[0].numel() / 2, err[..., 4:].sum() / err[0].numel() / 2
    weighted = diffusion_loss(pred, target, mask=mask, unmasked_weight=0.25)
    assert weighted.item() == pytest.approx((white + 0.25 * black).item(), rel=1e-5)
    normalized = diffusion_loss(pred, target, mask=mask, unmasked_weight=0.25, normalize_masked_area_loss=True)
    assert normalized.item() == pytest.approx(weighted.item() / 0.625, rel=1e-5)  # mean of the clamped mask


def test_unmasked_probability_trains_that_share_on_the_whole_image():
    mask = torch.zeros(4000, 1, 16, 16)
    torch.manual_seed(0)
    out = training_mask(mask, (2, 2), unmasked_probability=0.25, device=torch.device("cpu"))
    whole = (out.flatten(1) == 1).all(dim=1).float().mean().item()
    assert whole == pytest.approx(0.25, abs=0.03)
    assert (out.flatten(1) == 0).all(dim=1).float().mean().item() == pytest.approx(0.75, abs=0.03)
    assert training_mask(None, (2, 2), unmasked_probability=0.5, device=torch.device("cpu")) is None
    never = training_mask(mask[:100], (2, 2), unmasked_probability=0.0, device=torch.device("cpu"))
    assert never.sum().item() == 0


def test_prior_preservation_counts_outside_the_clamped_mask_and_normalizes():
    pred, target = _pair()
    prior = torch.zeros_like(pred)
    mask = torch.zeros(2, 1, 8, 8)
    mask[0, :, :, :2] = 1.0  # sample 0: a quarter white; sample 1: all white (nothing outside)
    mask[1] = 1.0
    clamped = mask.clamp(0.1, 1.0)
    outside = 1 - clamped
    kw = dict(mask=mask, unmasked_weight=0.1, prior=prior, prior_weight=0.5)
    plain = ((pred - target) ** 2 * clamped).mean(dim=(1, 2, 3)) + 0.5 * (pred**2 * outside).mean(dim=(1, 2, 3))
    assert diffusion_loss(pred, target, **kw).item() == pytest.approx(plain.mean().item(), rel=1e-5)
    norm = ((pred - target) ** 2 * clamped).mean(dim=(1, 2, 3)) / clamped.mean(dim=(1, 2, 3))
    norm[0] += 0.5 * (pred[0] ** 2 * outside[0]).mean() / outside[0].mean()
    out = diffusion_loss(pred, target, normalize_masked_area_loss=True, **kw)
    assert torch.isfinite(out) and out.item() == pytest.approx(norm.mean().item(), rel=1e-5)
    assert diffusion_loss(pred, target, mask=mask, unmasked_weight=0.1, prior=prior).item() == pytest.approx(
        ((pred - target) ** 2 * clamped).mean().item(), rel=1e-5)  # weight 0: no prior term
