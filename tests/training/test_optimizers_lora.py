"""Every registered optimizer trains a LoRA: its zero-initialised up matrix moves, so the LoRA
changes the layer's output (LAMB and LARS once left it exactly zero)."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.enums import Optimizer as O
from ot_gradio.config.optimizer import OptimizerConfig
from ot_gradio.training.optimizers import OPTIMIZERS, create_optimizer, optimizer_eval_mode, optimizer_train_mode
from tests.training.test_optimizers import ADAPTIVE, LR, SETTINGS

CPU = torch.device("cpu")
STEPS = 3
# Prodigy's first step-size estimate (d0, 1e-6 by default) grows over many steps; start it where the others are.
OWN_SETTINGS = {**SETTINGS, O.PRODIGY: {"d0": 1e-3}}


class TinyLoRA(torch.nn.Module):
    """A frozen linear layer plus a rank-4 LoRA, initialised as ours (and kohya's) are: down random, up zero."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.base = torch.nn.Linear(16, 8).requires_grad_(False)
        self.down = torch.nn.Parameter(torch.randn(4, 16) / 4)
        self.up = torch.nn.Parameter(torch.zeros(8, 4))

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.down.T @ self.up.T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.delta(x)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS, key=str))
def test_every_optimizer_changes_a_loras_output(name):
    model = TinyLoRA()
    config = OptimizerConfig(optimizer=name, **OWN_SETTINGS.get(name, {}))  # default min_8bit_size: LoRA-sized weights
    lr = 1.0 if name in ADAPTIVE else LR.get(name, 1e-2)
    optimizer = create_optimizer([{"params": [model.down, model.up], "lr": lr, "name": "unet"}], config, CPU)
    gen = torch.Generator().manual_seed(1)
    x, target = torch.randn(32, 16, generator=gen), torch.randn(32, 8, generator=gen)
    optimizer_train_mode(optimizer)
    for _ in range(STEPS):
        loss = ((model(x) - target) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    optimizer_eval_mode(optimizer)  # the weights a sample or a save would use
    with torch.no_grad():
        change = model.delta(x).norm() / model.base(x).norm()
    assert model.up.abs().max() > 0, f"{name.value}: the LoRA's up matrix is still zero"
    assert change > 1e-4, f"{name.value}: the LoRA changes the output by only {change:.2e} of its norm"


@pytest.mark.parametrize("name", [O.LAMB, O.LARS])
def test_trust_ratio_still_clips_nonzero_weights(name):
    """Only all-zero weights step unclipped: once the up matrix is nonzero, bitsandbytes' relative
    update limit (max_unorm * ||w||) holds again."""
    model = TinyLoRA()
    max_unorm = 0.02
    optimizer = create_optimizer([{"params": [model.up], "lr": 1.0, "name": "unet"}],
                                 OptimizerConfig(optimizer=name, max_unorm=max_unorm), CPU)
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(1))
    for step in range(3):
        before = model.up.detach().clone()
        optimizer.zero_grad()
        (model(x) ** 2).mean().backward()
        optimizer.step()
        moved = (model.up.detach() - before).norm().item()
        if step == 0:
            assert moved > 0
        else:
            assert moved <= max_unorm * before.norm().item() * (1 + 1e-4) + 1e-6
