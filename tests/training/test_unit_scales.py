"""Divisions by one skipped (training/unit_scales.py): a UNet step computes the same numbers bit for
bit with a kernel fewer forward and backward per ResNet block and attention."""

from __future__ import annotations

import copy

import torch

from bench.step_operators import OperatorCount
from ot_gradio.training.unit_scales import UNIT, skip_unit_divisions


def _step(unet):
    g = torch.Generator().manual_seed(1)
    size = unet.config.sample_size
    latents = torch.randn(2, unet.config.in_channels, size, size, generator=g, requires_grad=True)
    text = torch.randn(2, 7, unet.config.cross_attention_dim, generator=g)
    with OperatorCount() as ops:
        out = unet(latents, torch.tensor([10, 700]), text).sample
        out.square().mean().backward()
    return out.detach(), latents.grad, [p.grad for p in unet.parameters()], ops.counts["div"]


def test_a_unet_step_is_the_same_without_its_divisions_by_one():
    from ot_gradio.models.tiny.sd15 import tiny_sd15_unet

    unet = tiny_sd15_unet(seed=0)
    skipped = copy.deepcopy(unet)
    blocks = [m for m in unet.modules() if hasattr(m, "output_scale_factor") or hasattr(m, "rescale_output_factor")]
    assert skip_unit_divisions([skipped]) == len(blocks) > 0
    out, grad_in, grads, divs = _step(unet)
    out2, grad_in2, grads2, divs2 = _step(skipped)
    assert torch.equal(out, out2) and torch.equal(grad_in, grad_in2)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads2, strict=True))
    assert divs - divs2 == 2 * len(blocks)  # one forward, one backward each
    assert skip_unit_divisions([skipped]) == 0  # already done


def test_unit_is_one_to_everything_but_a_tensor():
    import pickle

    x = torch.randn(3)
    assert x / UNIT is x
    assert 3.0 / UNIT == 3.0 and float(UNIT) == 1.0 and UNIT == 1.0 and 1 == UNIT and UNIT * 2 == 2.0 and UNIT + 1 == 2.0
    for other in (copy.deepcopy(UNIT), pickle.loads(pickle.dumps(UNIT))):
        assert other == 1.0 and x / other is x


def test_only_factors_of_one_are_replaced():
    from torch import nn

    block = nn.Module()
    block.output_scale_factor = 2.0
    block.rescale_output_factor = 1.0
    assert skip_unit_divisions([block]) == 1
    assert block.output_scale_factor == 2.0 and block.rescale_output_factor is UNIT


def test_other_operations_take_unit_as_one():
    """PyTorch hands `UNIT` every operation it is an argument of (`__torch_function__`): only a
    division by it is skipped; anything else computes with 1.0."""
    x = torch.randn(3, requires_grad=True)
    assert torch.div(x, UNIT) is x and x.div(UNIT) is x
    assert torch.equal(x * UNIT, x) and (x * UNIT) is not x and torch.equal(torch.add(x, UNIT), x + 1.0)
