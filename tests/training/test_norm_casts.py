"""Frozen 16-bit norm weights cast to float32 once a step (training/norm_casts.py): the same
numbers as autocast's casts at each call, two copies fewer per norm, and the modules as they were
outside the step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.step_operators import OperatorCount
from ot_gradio.training.norm_casts import affine_norms, float32_norms
from tests.gpu_types import as_on_a_gpu


def _unet_with_lora(dtype):
    from ot_gradio.models.tiny.sd15 import tiny_sd15_unet
    from ot_gradio.training.lora import add_lora

    unet = tiny_sd15_unet(seed=0)
    params = add_lora(unet, kind="unet", rank=4, alpha=1.0, dropout=0.0, layer_preset="full", dtype=torch.float32)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    for p in unet.parameters():
        if not p.requires_grad:
            p.data = p.data.to(dtype)
    return unet, params


def _step(unet, params, dtype, norms=None):
    g = torch.Generator().manual_seed(1)
    size = unet.config.sample_size
    latents = torch.randn(2, unet.config.in_channels, size, size, generator=g)
    text = torch.randn(2, 7, unet.config.cross_attention_dim, generator=g)
    with as_on_a_gpu(), torch.autocast("cpu", dtype=dtype), OperatorCount() as ops:
        if norms is None:
            out = unet(latents, torch.tensor([10, 700]), text).sample
            out.float().square().mean().backward()
        else:
            with float32_norms(norms, dtype, torch.device("cpu")):
                out = unet(latents, torch.tensor([10, 700]), text).sample
                out.float().square().mean().backward()
    grads = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return out.detach(), grads, ops.counts["_to_copy"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_step_computes_the_same_with_two_copies_fewer_per_norm(dtype):
    """As on a GPU (16-bit UNet, norms in float32 as CUDA's autocast runs them): the same output
    and gradients, bit for bit, and the weight's and the bias's copies of each norm replaced by one
    cast for all; afterwards the norms hold their own 16-bit weights and forward again."""
    unet, params = _unet_with_lora(dtype)
    norms = affine_norms([unet])
    assert {type(n) for n in norms} == {nn.GroupNorm, nn.LayerNorm}
    weights = [(n.weight, n.bias) for n in norms]
    out, grads, once = _step(unet, params, dtype, norms)
    ref_out, ref_grads, each = _step(unet, params, dtype)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=0, atol=0)
    assert each - once == 2 * len(norms) - 1, (each, once, len(norms))  # one cast (of the concatenation) for all
    assert [(n.weight, n.bias) for n in norms] == weights and all(n.weight.dtype == dtype for n in norms)
    assert not any("forward" in n.__dict__ for n in norms)


def test_outside_autocast_a_norm_runs_as_it_is():
    """A part run with autocast off inside the step (fp16_fallback.py's FLOAT_32 on a CPU) gets the
    module's own forward: its 16-bit weights, its output type."""
    norm = nn.LayerNorm(16).to(torch.bfloat16).requires_grad_(False)
    nn.init.normal_(norm.weight)
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    with float32_norms([norm], torch.bfloat16, torch.device("cpu")):
        assert "forward" in norm.__dict__
        with torch.autocast("cpu", enabled=False):
            off = norm(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            on = norm(x)
    torch.testing.assert_close(off, nn.LayerNorm.forward(norm, x), rtol=0, atol=0)
    expected = torch.nn.functional.layer_norm(x, (16,), norm.weight.float(), norm.bias.float(), norm.eps)
    torch.testing.assert_close(on, expected, rtol=0, atol=0)


def test_norms_that_train_are_float32_or_are_wrapped_are_left_alone():
    trained = nn.GroupNorm(2, 8).to(torch.float16)
    full = nn.LayerNorm(8)
    wrapped = nn.LayerNorm(8).to(torch.float16)
    wrapped.forward = lambda x: x
    frozen = nn.LayerNorm(8).to(torch.float16)
    for n in (full, wrapped, frozen):
        n.requires_grad_(False)
    no_affine = nn.LayerNorm(8, elementwise_affine=False)
    assert affine_norms([nn.Sequential(trained, full, wrapped, frozen, no_affine)]) == [trained, full, wrapped, frozen]
    with float32_norms([trained, full, wrapped, frozen], torch.float16, torch.device("cpu")):
        assert "forward" not in trained.__dict__ and "forward" not in full.__dict__ and "forward" in frozen.__dict__
        assert wrapped(torch.ones(1)).item() == 1.0  # its own wrapper kept
    assert "forward" in wrapped.__dict__ and "forward" not in frozen.__dict__
    with float32_norms([frozen], None, torch.device("cpu")):  # no autocast: nothing
        assert "forward" not in frozen.__dict__
