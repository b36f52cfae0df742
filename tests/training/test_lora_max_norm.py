"""lora_max_norm (kohya's scale_weight_norms): each LoRA layer's weight change is capped after a step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ot_gradio.config.doctor import errors
from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.lora import add_lora
from ot_gradio.training.lora_max_norm import LoraMaxNorm, delta_norm, lora_pairs


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(24, 40)
        self.conv = nn.Conv2d(8, 12, 3, padding=1)


def _with_lora(alpha: float = 2.0) -> nn.Module:
    torch.manual_seed(0)
    block = Block()
    add_lora(block, kind="unet", rank=4, alpha=alpha, dropout=0.0, layer_preset="full")
    for _down, up, _ in lora_pairs([block]):
        up.data.normal_()  # peft starts the up matrices at zero
    return block


def _full_delta(down, up, scale):
    return scale * (up.reshape(up.shape[0], -1) @ down.reshape(down.shape[0], -1))


def test_the_norm_from_the_gram_matrices_is_the_full_deltas():
    pairs = lora_pairs([_with_lora()])
    assert [tuple(d.shape) for d, _, _ in pairs] == [(4, 24), (4, 8, 3, 3)]  # the linear and the 3x3 conv layer
    for down, up, scale in pairs:
        assert scale == pytest.approx(0.5)
        full = torch.linalg.norm(_full_delta(down, up, scale))
        assert delta_norm(down, up, scale).item() == pytest.approx(full.item(), rel=1e-5)


def test_layers_above_the_limit_are_scaled_to_it_and_the_others_left_as_they_are():
    block = _with_lora()
    pairs = lora_pairs([block])
    norms = [delta_norm(*p).item() for p in pairs]
    limit = (norms[0] + norms[1]) / 2  # one layer above, one below
    high = max(range(2), key=lambda i: norms[i])
    before = [(d.detach().clone(), u.detach().clone()) for d, u, _ in pairs]
    cap = LoraMaxNorm([block], limit)
    cap.apply()
    assert int(cap.scaled) == 1
    for i, (down, up, scale) in enumerate(pairs):
        if i == high:
            assert delta_norm(down, up, scale).item() == pytest.approx(limit, rel=1e-5)
            ratio = (down / before[i][0]).flatten()
            assert torch.allclose(ratio, ratio[0].expand_as(ratio)) and torch.allclose(up / before[i][1], ratio[0])  # both by sqrt
        else:
            assert torch.equal(down, before[i][0]) and torch.equal(up, before[i][1])


def test_a_frozen_layer_is_not_capped():
    block = _with_lora()
    for p in block.parameters():
        p.requires_grad_(False)
    before = [u.detach().clone() for _, u, _ in lora_pairs([block])]
    LoraMaxNorm([block], 1e-6).apply()
    assert all(torch.equal(u, b) for (_, u, _), b in zip(lora_pairs([block]), before, strict=True))


@pytest.mark.parametrize("peft_type", ["LOHA", "LOKR", "OFT_2"])
def test_the_doctor_refuses_it_for_other_adapters(peft_type):
    config = TrainConfig(training_method="LORA", peft_type=peft_type, lora_max_norm=1.0)
    assert any(e.startswith("lora_max_norm:") for e in errors(config))
    assert not any(e.startswith("lora_max_norm:") for e in errors(TrainConfig(training_method="LORA", lora_max_norm=1.0)))
