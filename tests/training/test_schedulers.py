import math

import pytest

from ot_gradio.config.enums import LearningRateScheduler as S
from ot_gradio.training.schedulers import lr_curve, lr_factor, warmup_steps


def test_constant_is_one_after_warmup():
    assert [lr_factor(S.CONSTANT, s, 100, warmup=10) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert all(lr_factor(S.CONSTANT, s, 100, warmup=10) == 1.0 for s in range(10, 100))


def test_warmup_fraction_of_total():
    assert warmup_steps(0.1, 200) == 20
    assert warmup_steps(30, 200) == 30
    assert warmup_steps(0, 200) == 0


@pytest.mark.parametrize("step", [0, 25, 50, 99])
def test_linear_and_cosine_formulas(step):
    total = 100
    p = step / total
    assert lr_factor(S.LINEAR, step, total) == pytest.approx(1 - p)
    assert lr_factor(S.COSINE, step, total) == pytest.approx(0.5 * (1 + math.cos(math.pi * p)))
    assert lr_factor(S.REX, step, total) == pytest.approx((1 - p) / (0.5 + 0.5 * (1 - p)))
    assert lr_factor(S.COSINE_WITH_RESTARTS, step, total, cycles=2) == pytest.approx(0.5 * (1 + math.cos(2 * math.pi * 2 * p)))
    assert lr_factor(S.COSINE_WITH_HARD_RESTARTS, step, total, cycles=2) == pytest.approx(0.5 * (1 + math.cos(math.pi * ((2 * p) % 1))))


def test_min_factor_floor():
    curve = lr_curve(S.LINEAR, 100, 0, 1, 0.2, base_lr=1.0)
    assert min(curve) >= 0.2 - 1e-9
    assert curve[0] == pytest.approx(1.0)


def test_unavailable_scheduler_names_the_field():
    with pytest.raises(ValueError, match="learning_rate_scheduler"):
        lr_factor(S.CUSTOM, 0, 10)


def test_torch_scheduler_follows_the_formula():
    import torch

    from ot_gradio.training.schedulers import create_scheduler

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.5)
    sched = create_scheduler(opt, S.COSINE, 10, 2, 1, 0.0)
    seen = []
    for _ in range(10):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx(lr_curve(S.COSINE, 10, 2, 1, 0.0, 0.5))
