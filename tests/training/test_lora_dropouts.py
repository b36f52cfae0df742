"""kohya's rank and module dropout on plain LoRA layers: dropped while training, unbiased on
average, nothing dropped in evaluation; refused for other adapters."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ot_gradio.config.doctor import errors
from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.lora import add_lora
from ot_gradio.training.lora_dropouts import install_lora_dropouts
from ot_gradio.training.lora_max_norm import lora_pairs


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(12, 10)
        self.conv = nn.Conv2d(3, 5, 3, padding=1)


def _block(rank: float = 0.0, module: float = 0.0) -> Block:
    torch.manual_seed(0)
    block = Block()
    add_lora(block, kind="unet", rank=8, alpha=8.0, dropout=0.0, layer_preset="full")
    for _, up, _ in lora_pairs([block]):
        up.data.normal_()
    assert install_lora_dropouts([block], rank, module) == (2 if rank or module else 0)
    return block


def _deltas(block: Block, x: torch.Tensor, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    base_linear = block.proj.base_layer(x)
    base_conv = block.conv.base_layer(image)
    return block.proj(x) - base_linear, block.conv(image) - base_conv


def test_rank_dropout_drops_ranks_per_sample_and_is_unbiased():
    x, image = torch.randn(4, 6, 12), torch.randn(4, 3, 5, 5)  # a linear's [B, tokens, in]; a conv's [B, C, H, W]
    plain = _block()
    dropped = _block(rank=0.5)
    with torch.no_grad():
        full = _deltas(plain, x, image)
        draws = [_deltas(dropped, x, image) for _ in range(400)]
        assert not torch.allclose(draws[0][0], draws[1][0])  # a new mask each forward
        for i in range(2):
            mean = torch.stack([d[i] for d in draws]).mean(0)
            assert torch.allclose(mean, full[i], atol=0.25 * full[i].abs().max().item())  # kept ranks scaled by 1 / (1 - p)
        dropped.eval()
        evaluated = _deltas(dropped, x, image)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(evaluated, full, strict=True))  # nothing dropped in evaluation


def test_module_dropout_leaves_whole_layers_out():
    x, image = torch.randn(2, 12), torch.randn(2, 3, 4, 4)
    block = _block(module=0.5)
    with torch.no_grad():
        left_out = sum(bool(_deltas(block, x, image)[0].abs().max() == 0) for _ in range(400))
    assert 150 < left_out < 250


def test_a_layer_with_dropouts_runs_peft_forward_and_gets_gradients():
    block = _block(rank=0.3, module=0.1)
    out = block.proj(torch.randn(3, 12)).sum() + block.conv(torch.randn(1, 3, 4, 4)).sum()
    out.backward()
    assert all(p.grad is not None for p in block.parameters() if p.requires_grad)


@pytest.mark.parametrize("field", ["lora_rank_dropout", "lora_module_dropout"])
def test_the_doctor_refuses_them_for_dora_and_other_adapters(field):
    assert not any(e.startswith(f"{field}:") for e in errors(TrainConfig(training_method="LORA", **{field: 0.1})))
    for other in ({"lora_decompose": True}, {"peft_type": "LOHA"}, {"peft_type": "LOKR"}):
        assert any(e.startswith(f"{field}:") for e in errors(TrainConfig(training_method="LORA", **{field: 0.1}, **other)))
