"""quantization.layer_filter picks the denoiser's Linear layers a quantized weight type converts."""

import pytest
import torch
from torch import nn

from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.quantize import LinearFp8, quantization_filter, quantize_linear_layers


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer_blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.proj_out = nn.Linear(4, 4)


def _quantized(net):
    return sorted(name for name, m in net.named_modules() if isinstance(m, LinearFp8))


def _config(**quantization):
    return TrainConfig.model_validate({"quantization": quantization})


@pytest.mark.parametrize(("quantization", "expected"), [
    ({}, ["proj_out", "transformer_blocks.0", "transformer_blocks.1"]),
    ({"layer_filter": "transformer_block", "layer_filter_preset": "blocks"}, ["transformer_blocks.0", "transformer_blocks.1"]),
    ({"layer_filter": r"blocks\.1$, ^proj", "layer_filter_regex": True}, ["proj_out", "transformer_blocks.1"]),
])
def test_filter_selects_the_layers(quantization, expected):
    net = Net()
    count = quantize_linear_layers(net, "FLOAT_8", torch.device("cpu"), torch.float32, "transformer",
                                   include=quantization_filter(_config(**quantization)))
    assert _quantized(net) == expected and count == len(expected)


def test_a_filter_that_matches_nothing_is_refused_by_name():
    with pytest.raises(ValueError, match="quantization.layer_filter: matches no layer of transformer"):
        quantize_linear_layers(Net(), "FLOAT_8", torch.device("cpu"), torch.float32, "transformer",
                               include=quantization_filter(_config(layer_filter="nothing_like_this")))
