"""INT_W8A8 / FLOAT_W8A8 layers (training/quantize.py LinearW8A8): 8-bit weights and 8-bit matmuls.
The bounds are the worst case of the rounding: each operand's codes are off by at most half a step
(int8: half the row's scale; float8 e4m3, 3 mantissa bits: 1/16 of the value, or half the
subnormal step 2^-9 of the row's scale), summed over the product; plus float32's own rounding."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from ot_gradio.config.enums import DataType
from ot_gradio.training import quantize
from ot_gradio.training.quantize import CODE_MAX, W8A8_CODES, LinearW8A8, quantize_linear_layers, w8a8_kernel_problem

CPU = torch.device("cpu")
TYPES = [DataType.INT_W8A8, DataType.FLOAT_W8A8]
KERNEL = {torch.int8: "_int_mm", torch.float8_e4m3fn: "_scaled_mm"}


def rounding(t: torch.Tensor, code: torch.dtype) -> torch.Tensor:
    """Per element, the most quantizing `t` row by row to `code` can be off."""
    scale = t.abs().amax(dim=1, keepdim=True) / CODE_MAX[code]
    if code == torch.int8:
        return (scale / 2).expand_as(t)
    return t.abs() / 16 + scale / 1024


def emulated(t: torch.Tensor, code: torch.dtype) -> torch.Tensor:
    """`t` quantized row by row to `code` and back, computed here in float64: the row's largest
    magnitude maps to the code's largest, int8 rounds to nearest, float8 as torch casts."""
    scale = t.double().abs().amax(dim=1, keepdim=True) / CODE_MAX[code]
    scaled = t.double() / scale
    return (scaled.round() if code == torch.int8 else scaled.float().to(code).double()) * scale


def product_bound(a: torch.Tensor, da: torch.Tensor, b: torch.Tensor, db: torch.Tensor) -> torch.Tensor:
    """|a' @ b' - a @ b| for |a' - a| <= da and |b' - b| <= db (elementwise), plus float32's rounding."""
    a, b = a.abs(), b.abs()
    return da @ b + a @ db + da @ db + 1e-5 * (a + da) @ (b + db)


def layer(data_type: DataType, seed: int = 0) -> tuple[nn.Linear, LinearW8A8]:
    torch.manual_seed(seed)
    reference = nn.Linear(64, 48)
    quantized = nn.Sequential(nn.Linear(64, 48))
    quantized.load_state_dict({f"0.{k}": v for k, v in reference.state_dict().items()})
    assert quantize_linear_layers(quantized, data_type, CPU, torch.float32, "transformer") == 1
    assert isinstance(quantized[0], LinearW8A8) and quantized[0].kernel
    return reference, quantized[0]


@pytest.fixture
def kernel_calls(monkeypatch):
    """How often each 8-bit kernel ran (after the device's probe, made once)."""
    for data_type in TYPES:
        assert w8a8_kernel_problem(data_type, CPU) is None
    calls = {name: 0 for name in KERNEL.values()}
    for name in calls:
        original = getattr(torch, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, counted)
    return calls


@pytest.mark.parametrize("data_type", TYPES, ids=str)
def test_the_output_is_the_float_layers_within_8_bit_rounding_from_the_8_bit_kernel(data_type, kernel_calls):
    code = W8A8_CODES[data_type]
    reference, quantized = layer(data_type)
    x = torch.randn(2, 24, 64) * torch.linspace(0.1, 3, 64)  # 48 rows, columns of different sizes
    out = quantized(x)
    assert out.shape == (2, 24, 48) and out.dtype == torch.float32
    assert kernel_calls == {name: int(name == KERNEL[code]) for name in KERNEL.values()}
    rows, w = x.reshape(48, 64), reference.weight.detach()
    bound = product_bound(rows, rounding(rows, code), w.t(), rounding(w, code).t())
    error = (out.reshape(48, 48) - reference(rows).detach()).abs()
    assert (error <= bound).all(), (error - bound).max()
    expected = emulated(rows, code) @ emulated(w, code).t() + reference.bias.detach().double()
    assert torch.allclose(out.reshape(48, 48).double(), expected, rtol=1e-5, atol=1e-5)  # the activations quantized too


@pytest.mark.parametrize("data_type", TYPES, ids=str)
def test_the_input_gradient_comes_from_the_8_bit_kernel_within_rounding_and_the_weight_gets_none(data_type, kernel_calls):
    code = W8A8_CODES[data_type]
    reference, quantized = layer(data_type, seed=1)
    x = torch.randn(40, 64, requires_grad=True)
    grad = torch.randn(40, 48)
    quantized(x).backward(grad)
    assert kernel_calls[KERNEL[code]] == 2  # forward and backward
    assert quantized.weight.grad is None and not quantized.weight.requires_grad
    w = reference.weight.detach()
    # grad @ W with W's rows scaled: the scale goes into the gradient's columns before it is quantized
    scaled = grad * quantized.weight_scale.t()
    codes = quantized.weight.float()
    bound = product_bound(scaled, rounding(scaled, code), codes, torch.zeros_like(codes)) + grad.abs() @ rounding(w, code)
    error = (x.grad - grad @ w).abs()
    assert (error <= bound).all(), (error - bound).max()
    assert torch.allclose(x.grad.double(), emulated(scaled, code) @ codes.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data_type", TYPES, ids=str)
def test_16_rows_or_fewer_compute_with_the_expanded_weight(data_type, kernel_calls):
    _, quantized = layer(data_type)
    x = torch.randn(16, 64)
    expected = F.linear(x, quantized.dequantized_weight(torch.float32), quantized.bias)
    assert torch.allclose(quantized(x), expected, atol=1e-6)
    assert sum(kernel_calls.values()) == 0


def test_a_device_that_cannot_run_the_kernel_computes_the_plain_way_said_once(monkeypatch, caplog):
    """The probe's refusal is one warning for the run (configure_model's); a refusal the probe let
    through is said once in the log, however many layers and steps meet it."""
    def refuse(*args, **kwargs):
        raise RuntimeError("_scaled_mm: not supported on this device\nmore detail")

    _, first = layer(DataType.FLOAT_W8A8)  # made where the probe passes
    _, second = layer(DataType.FLOAT_W8A8, seed=1)
    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    quantize._probe.cache_clear()
    try:
        problem = w8a8_kernel_problem(DataType.FLOAT_W8A8, CPU)
        net = nn.Sequential(nn.Linear(64, 48), nn.Linear(48, 32))
        quantize_linear_layers(net, DataType.FLOAT_W8A8, CPU, torch.float32, "transformer")
    finally:
        quantize._probe.cache_clear()
    assert problem == ("FLOAT_W8A8: cpu cannot run its 8-bit matmul (RuntimeError: _scaled_mm: not supported on this device); those "
                       "layers compute with the weight expanded to the train data type instead, as FLOAT_8 does (the same memory, "
                       "no 8-bit speed-up)")
    assert w8a8_kernel_problem(DataType.INT_W8A8, CPU) is None
    assert not any(m.kernel for m in net)
    x = torch.randn(20, 64)
    assert torch.allclose(net(x), F.linear(F.linear(x, net[0].dequantized_weight(torch.float32), net[0].bias),
                                           net[1].dequantized_weight(torch.float32), net[1].bias), atol=1e-6)

    monkeypatch.setattr(quantize, "_FALLBACKS_SAID", set())
    with caplog.at_level(logging.WARNING, logger=quantize.__name__):
        for _ in range(2):  # two steps of two layers
            first(torch.randn(20, 64))
            second(torch.randn(20, 64))
    said = [r.getMessage() for r in caplog.records if r.name == quantize.__name__]
    assert len(said) == 1 and said[0].startswith("FLOAT_W8A8: cpu cannot run its 8-bit matmul (RuntimeError: _scaled_mm")
    assert not first.kernel and not second.kernel
