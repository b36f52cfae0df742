"""Percentile clipping (optimizer.percentile_clipping), done around the step since bitsandbytes 0.50
dropped it: bitsandbytes' rule (a ring of the last 100 squared norms per weight, all filled with
the first; the gradient scaled down to the given percentile of it), installed on the optimizers
OneTrainer gives the option, and kept in the optimizer's state dict for a resume."""

import copy

import pytest
import torch

from ot_gradio.config.optimizer import OptimizerConfig
from ot_gradio.training.optimizers import create_optimizer
from ot_gradio.training.optimizers.percentile_clipping import KEY, enable_percentile_clipping


def _reference(norms: list[float], percentile: int) -> list[float]:
    """bitsandbytes' percentile_clipping, step by step: the scale of each step's gradient."""
    ring, scales = [0.0] * 100, []
    for step, norm in enumerate(norms, start=1):
        if step == 1:
            ring = [norm**2] * 100
        else:
            ring[step % 100] = norm**2
        current, limit = ring[step % 100] ** 0.5, sorted(ring)[percentile] ** 0.5
        scales.append(limit / current if current > limit else 1.0)
    return scales


def test_the_gradient_is_scaled_to_the_percentile_of_its_recent_norms():
    weight = torch.nn.Parameter(torch.zeros(3))
    sgd = torch.optim.SGD([weight], lr=1.0)
    enable_percentile_clipping(sgd, 5)
    norms = [1.0, 1.0, 10.0, 2.0] + [1.0 + 0.1 * i for i in range(120)] + [50.0]
    direction = torch.tensor([0.6, 0.8, 0.0])  # unit length
    for norm, scale in zip(norms, _reference(norms, 5), strict=True):
        before = weight.detach().clone()
        weight.grad = direction * norm
        sgd.step()
        assert torch.allclose(before - weight.detach(), direction * norm * scale, rtol=1e-5), (norm, scale)
    assert _reference(norms, 5)[2] == pytest.approx(0.1)  # the spike of 10 after ones is brought down to 1


def test_100_is_off_and_out_of_range_is_refused():
    sgd = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    assert enable_percentile_clipping(sgd, 100) is None and enable_percentile_clipping(sgd, None) is None
    with pytest.raises(ValueError, match="optimizer.percentile_clipping"):
        enable_percentile_clipping(sgd, 0)


@pytest.mark.parametrize("name", ["ADAM_8BIT", "LION_8BIT", "RMSPROP"])
def test_installed_on_the_optimizers_that_offer_it_and_kept_for_a_resume(name):
    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(64, 64)) for _ in range(2)]
    settings = OptimizerConfig(optimizer=name, percentile_clipping=10)
    optimizer = create_optimizer([{"params": weights, "lr": 1e-3, "name": "unet"}], settings, torch.device("cpu"))
    assert optimizer.percentile_clipping.percentile == 10
    for step in range(3):
        for w in weights:
            w.grad = torch.randn_like(w) * (10.0 if step == 2 else 1.0)
        optimizer.step()
    saved = copy.deepcopy(optimizer.state_dict())  # as a backup file holds it (torch's load shares same-device tensors)
    assert set(saved[KEY]) == {0, 1} and saved[KEY][0]["step"] == 3
    fresh = [torch.nn.Parameter(w.detach().clone()) for w in weights]
    resumed = create_optimizer([{"params": fresh, "lr": 1e-3, "name": "unet"}], settings, torch.device("cpu"))
    resumed.load_state_dict(saved)
    assert KEY in saved  # the backup's dict is left as it was
    for w, f in zip(weights, fresh, strict=True):
        w.grad = torch.ones_like(w) * 5.0
        f.grad = torch.ones_like(f) * 5.0
    optimizer.step()
    resumed.step()
    for w, f in zip(weights, fresh, strict=True):
        assert torch.equal(w.detach(), f.detach())  # the same clipping and the same step after the resume
    assert resumed.percentile_clipping.history[fresh[0]][1] == 4


def test_not_installed_where_onetrainer_has_no_such_option():
    settings = OptimizerConfig(optimizer="ADAMW", percentile_clipping=10)
    optimizer = create_optimizer([{"params": [torch.nn.Parameter(torch.zeros(2))], "lr": 1e-3}], settings, torch.device("cpu"))
    assert not hasattr(optimizer, "percentile_clipping")
