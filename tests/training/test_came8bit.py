"""CAME_8BIT (training/optimizers/came8bit.py): CAME's update with the first moment of large
matrices kept in 8 bits. Unquantized it is CAME (pytorch-optimizer's, the CAME entry); quantized
it follows the 32-bit run closely, keeps a quarter of the moment's bytes and resumes exactly."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.enums import Optimizer as O
from ot_gradio.config.optimizer import OptimizerConfig
from ot_gradio.training.optimizers import create_optimizer
from ot_gradio.training.optimizers.came8bit import CAME8bit, dequantize, quantize

CPU = torch.device("cpu")


def model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 96), torch.nn.Tanh(), torch.nn.Linear(96, 8))


def run(optimizer: torch.optim.Optimizer, net: torch.nn.Module, steps: int) -> list[float]:
    gen = torch.Generator().manual_seed(1)
    dtype = next(net.parameters()).dtype
    x, y = torch.randn(64, 32, generator=gen).to(dtype), torch.randn(64, 8, generator=gen).to(dtype)
    losses = []
    for _ in range(steps):
        loss = ((net(x) - y) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def weights(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def test_blocks_round_trip_within_half_a_step():
    values = torch.randn(1000) * torch.linspace(0.01, 10, 1000)
    codes, step, low = quantize(values, 64)
    assert codes.dtype == torch.uint8 and codes.shape == (16, 64)  # 1000 values, padded to 16 blocks
    back = dequantize(codes, step, low, values.shape)
    per_value_step = step.repeat_interleave(64)[:1000]
    assert ((back - values).abs() <= per_value_step / 2 + 1e-6).all()
    zeros = dequantize(*quantize(torch.zeros(10, 10), 32), torch.Size((10, 10)))
    assert torch.equal(zeros, torch.zeros(10, 10))  # a constant block: no division by zero


def test_unquantized_it_is_the_came_optimizer():
    ends = []
    for name in (O.CAME, O.CAME_8BIT):
        net = model()
        config = OptimizerConfig(optimizer=name, weight_decay=0.0, min_8bit_size=10**9)
        run(create_optimizer([{"params": list(net.parameters()), "lr": 1e-2}], config, CPU), net, 10)
        ends.append(weights(net))
    assert torch.allclose(ends[0], ends[1], atol=1e-6), f"differ by {(ends[0] - ends[1]).abs().max():.2e}"


def test_quantized_it_follows_the_32_bit_run_with_a_quarter_of_the_bytes():
    results = {}
    for bits, min_size in ((32, 10**9), (8, 0)):
        net = model()
        optimizer = create_optimizer([{"params": list(net.parameters()), "lr": 1e-2}],
                                     OptimizerConfig(optimizer=O.CAME_8BIT, min_8bit_size=min_size, quant_block_size=256), CPU)
        losses = run(optimizer, net, 30)
        state = optimizer.state[net[0].weight]
        moment = [v for k, v in state.items() if k.startswith("exp_avg") and "_row" not in k and "_col" not in k]
        results[bits] = losses, sum(t.numel() * t.element_size() for t in moment), state
        assert optimizer.state[net[0].bias]["exp_avg"].dtype == torch.float32  # a 1-D tensor keeps a 32-bit moment
    (full, full_bytes, _), (eight, eight_bytes, state) = results[32], results[8]
    assert state["exp_avg_codes"].dtype == torch.uint8 and "exp_avg" not in state
    assert state["exp_avg_codes"].shape[1] == 256  # Quantization block size reaches the optimizer
    assert eight_bytes < 0.3 * full_bytes
    # 30 steps take the loss from 1.13 to 0.052 in 32 bits; 8 bits end within 10 % of that
    assert eight[-1] < 0.1 * eight[0] and abs(eight[-1] - full[-1]) < 0.1 * full[-1], (full[-1], eight[-1])


def test_settings_are_checked():
    with pytest.raises(ValueError, match="quant_block_size"):
        CAME8bit([torch.nn.Parameter(torch.zeros(4))], quant_block_size=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_quantized_state_resumes_exactly(dtype, tmp_path):
    config = OptimizerConfig(optimizer=O.CAME_8BIT, min_8bit_size=0, quant_block_size=128, stochastic_rounding=False)
    ends = []
    for resume in (False, True):
        net = model().to(dtype)
        optimizer = create_optimizer([{"params": list(net.parameters()), "lr": 1e-2}], config, CPU)
        run(optimizer, net, 3)
        if resume:
            torch.save(optimizer.state_dict(), tmp_path / "state.pt")
            optimizer = create_optimizer([{"params": list(net.parameters()), "lr": 1e-2}], config, CPU)
            optimizer.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
        run(optimizer, net, 3)
        ends.append(weights(net))
    assert torch.equal(ends[0], ends[1])
