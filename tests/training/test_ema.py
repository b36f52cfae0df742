"""EMA of the trained weights (ema.py): the update, its interval and warm-up, swapping the
average in and out, and its state for backups."""

import pytest
import torch

from ot_gradio.training.ema import EMA


def _params(*values):
    return [torch.nn.Parameter(torch.full((3,), float(v))) for v in values]


def test_update_follows_onetrainers_formula_with_warmup():
    params = _params(0.0)
    ema = EMA(params, decay=0.9, update_interval=1)
    assert ema.current_decay(0) == pytest.approx(1 / 10)
    assert ema.current_decay(5) == pytest.approx(6 / 15)
    assert ema.current_decay(1000) == pytest.approx(0.9)
    expected = 0.0
    for step in range(30):
        with torch.no_grad():
            params[0].fill_(float(step + 1))
        ema.step(params, step)
        d = min((1 + step) / (10 + step), 0.9)
        expected = expected + (1 - d) * ((step + 1) - expected)
        assert ema.weights[0][0].item() == pytest.approx(expected, rel=1e-6)


def test_update_interval_skips_steps():
    params = _params(0.0)
    ema = EMA(params, decay=0.5, update_interval=3)
    with torch.no_grad():
        params[0].fill_(4.0)
    assert [ema.step(params, s) for s in range(6)] == [False, False, True, False, False, True]
    # step 2: d = min(3/12, .5) = .25 -> 3.0; step 5: d = 6/15 = .4 -> 3 + .6 * 1 = 3.6
    assert ema.weights[0][0].item() == pytest.approx(3.6)


def test_frozen_weights_keep_their_average():
    a, b = _params(0.0, 0.0)
    ema = EMA([a, b], decay=0.0)
    b.requires_grad_(False)
    with torch.no_grad():
        a.fill_(1.0)
        b.fill_(1.0)
    ema.step([a, b], 100)
    assert ema.weights[0][0].item() == 1.0 and ema.weights[1][0].item() == 0.0


def test_applied_swaps_the_average_in_and_restores_the_live_weights_exactly():
    params = _params(1.0)
    ema = EMA(params, decay=0.9, device="cpu")
    with torch.no_grad():
        params[0].copy_(torch.tensor([0.1, 0.2, 0.3]))
    live = params[0].detach().clone()
    with ema.applied(params):
        assert torch.equal(params[0].detach(), torch.ones(3))
    assert torch.equal(params[0].detach(), live)


def test_average_is_float32_for_half_weights():
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    ema = EMA([p], decay=0.999)
    assert ema.weights[0].dtype == torch.float32
    with ema.applied([p]):
        assert p.dtype == torch.bfloat16


def test_state_round_trip_and_mismatch():
    params = _params(2.0, 3.0)
    ema = EMA(params, decay=0.99)
    other = EMA(_params(0.0, 0.0), decay=0.99)
    other.load_state_dict(ema.state_dict())
    assert all(torch.equal(x, y) for x, y in zip(ema.weights, other.weights, strict=True))
    with pytest.raises(ValueError, match="EMA"):
        EMA(_params(0.0), decay=0.99).load_state_dict(ema.state_dict())


def test_one_update_for_all_weights_in_any_type():
    """The update runs as one foreach operation (a GPU fine-tune launched three kernels per weight),
    with half weights cast to the float32 average first; values as the per-weight formula."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    params = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(6)] + [torch.nn.Parameter(torch.randn(4, dtype=torch.bfloat16))]
    ema = EMA(params, decay=0.9)
    before = [w.clone() for w in ema.weights]
    with torch.no_grad():
        for p in params:
            p.add_(1.0)
    with Ops() as ops:
        ema.step(params, 100)
    assert ops.names.count("_foreach_lerp_") == 1 and ops.names.count("_to_copy") == 1, ops.names
    for w, old, p in zip(ema.weights, before, params, strict=True):
        torch.testing.assert_close(w, old + 0.1 * (p.detach().float() - old))
