"""The fused and foreach optimizer steps are the default where torch has them, an explicit off
wins, and they give the same weights as the plain step."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.enums import Optimizer as O
from ot_gradio.config.optimizer import OptimizerConfig, optimizer_param_defaults
from ot_gradio.training.optimizers import OPTIMIZERS, create_optimizer, kernels
from ot_gradio.training.optimizers.kernels import choose_kernels

CPU = torch.device("cpu")
STEPS = 10


def _model(dtype: torch.dtype = torch.float32) -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)).to(dtype)


def _train(config: OptimizerConfig, dtype: torch.dtype = torch.float32) -> tuple[torch.optim.Optimizer, list[torch.Tensor]]:
    model = _model(dtype)
    optimizer = create_optimizer([{"params": list(model.parameters()), "lr": 1e-2, "name": "unet"}], config, CPU)
    gen = torch.Generator().manual_seed(1)
    x, target = torch.randn(32, 16, generator=gen).to(dtype), torch.randn(32, 8, generator=gen).to(dtype)
    for _ in range(STEPS):
        optimizer.zero_grad()
        ((model(x) - target) ** 2).mean().backward()
        optimizer.step()
    return optimizer, [p.detach().float().clone() for p in model.parameters()]


def test_the_fast_kernels_are_the_default():
    assert OptimizerConfig().fused is True and OptimizerConfig().foreach is True
    for name in (O.ADAM, O.ADAMW):  # "Load defaults" on the page keeps them on too (OneTrainer's table turns foreach off)
        assert optimizer_param_defaults(name)["fused"] is True and optimizer_param_defaults(name)["foreach"] is True
    optimizer, _ = _train(OptimizerConfig(optimizer=O.ADAMW))
    assert optimizer.defaults["fused"] is True and optimizer.defaults["foreach"] is False
    assert optimizer.step_kernel == "fused step (torch has one for cpu float32)"


@pytest.mark.parametrize("name", [O.ADAM, O.ADAMW])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_step_gives_the_same_weights(name, dtype):
    fused, fast = _train(OptimizerConfig(optimizer=name, stochastic_rounding=False), dtype)
    plain, slow = _train(OptimizerConfig(optimizer=name, stochastic_rounding=False, fused=False, foreach=False), dtype)
    assert fused.defaults["fused"] is True and plain.defaults["fused"] is False
    tolerance = {"atol": 1e-6, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}  # a bfloat16 ulp
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a, b, **tolerance)
    assert any(not torch.equal(a, p) for a, p in zip(fast, [p.detach().float() for p in _model(dtype).parameters()], strict=True))


def test_an_explicit_off_wins():
    optimizer, _ = _train(OptimizerConfig(optimizer=O.ADAMW, fused=False))
    assert optimizer.defaults["fused"] is False and optimizer.defaults["foreach"] is False
    assert optimizer.step_kernel == "one weight at a time (fused off in the config; no foreach step for cpu float32)"
    imported = OptimizerConfig.model_validate({"optimizer": "ADAMW", "fused": False, "foreach": None})  # blank = default
    assert _train(imported)[0].defaults["fused"] is False


def test_foreach_where_torch_has_it_and_fused_does_not_apply(monkeypatch):
    params = list(_model().parameters())
    adamw, sgd = OPTIMIZERS[O.ADAMW].keys, OPTIMIZERS[O.SGD].keys
    monkeypatch.setattr(kernels, "_available", lambda p, differentiable: (True, True))  # e.g. CUDA
    assert choose_kernels(adamw, {"fused": True, "foreach": True}, params)[0] == {"fused": True, "foreach": False}
    assert choose_kernels(adamw, {"fused": False, "foreach": True}, params)[0] == {"fused": False, "foreach": True}
    kwargs, note = choose_kernels(sgd, {"foreach": True}, params)
    assert kwargs == {"foreach": True} and note.startswith("foreach step")
    assert choose_kernels(sgd, {"foreach": False}, params)[0] == {"foreach": False}
    monkeypatch.setattr(kernels, "_available", lambda p, differentiable: (False, False))  # a device without either
    kwargs, note = choose_kernels(adamw, {"fused": True, "foreach": True}, params)
    assert kwargs == {"fused": False, "foreach": False} and note.startswith("one weight at a time (no fused step")
    assert choose_kernels(OPTIMIZERS[O.LION].keys, {"weight_decay": 0.0}, params) == ({"weight_decay": 0.0}, "the library's own step")


def test_torchs_own_rule_decides_availability():
    cpu32 = list(_model().parameters())
    assert kernels._available(cpu32, differentiable=False) == (True, False)  # CPU: fused AdamW, no foreach kernels
    assert kernels._available(cpu32, differentiable=True) == (False, False)
    assert kernels._available([torch.zeros(3, dtype=torch.int64)], differentiable=False)[0] is False
    optimizer = create_optimizer([{"params": cpu32, "lr": 1e-3}], OptimizerConfig(optimizer=O.ADAMW, differentiable=True), CPU)
    assert optimizer.defaults["fused"] is False and "differentiable" in optimizer.step_kernel
