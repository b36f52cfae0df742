"""The memory planner's probe under CUDA autocast (training/meta_autocast.py) and bitsandbytes'
layers on meta (memory_probe._meta_linear): what the probe counts must be what a GPU holds. The
figures they were checked against come from an H200 (docs/PERFORMANCE.md section 17); here the
types and the bytes the probe sees are checked."""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ot_gradio.training.memory_probe import LiveBytes, _meta_linear
from ot_gradio.training.meta_autocast import autocast_on_meta


def _block(x: torch.Tensor, conv: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    h = F.silu(F.group_norm(x, 2))  # a ResNet's norm and activation
    h = F.conv2d(h, conv, padding=1)
    return F.linear(h.flatten(1), weight)


def test_norms_run_in_float32_and_products_in_16_bits_also_in_the_recomputed_backward():
    conv = torch.nn.Parameter(torch.empty(4, 4, 3, 3, device="meta", dtype=torch.float16), requires_grad=False)
    weight = torch.nn.Parameter(torch.empty(8, 64, device="meta", dtype=torch.float32))  # a trained float32 weight
    x = torch.empty(2, 4, 4, 4, device="meta", dtype=torch.float16, requires_grad=True)
    original = F.linear
    with autocast_on_meta(torch.float16):
        h = F.silu(F.group_norm(x, 2))
        assert h.dtype == torch.float32  # autocast's float32 norm: what reads it is float32 too
        assert F.conv2d(h, conv, padding=1).dtype == torch.float16
        assert F.linear(torch.empty(2, 64, device="meta"), weight).dtype == torch.float16
        # diffusers' per-block checkpointing: the recomputation casts as the forward did (else checkpoint refuses it)
        out = checkpoint(_block, x, conv, weight, use_reentrant=False)
        out.float().sum().backward()
        real = F.linear(torch.ones(1, 3), torch.ones(2, 3))  # tensors that are not meta pass as they are
    assert x.grad is not None and weight.grad.dtype == torch.float32
    assert real.dtype == torch.float32 and F.linear is original


def test_the_probe_counts_the_float32_norm_copies_autocast_makes():
    def peak(emulate: bool) -> int:
        conv = torch.empty(64, 64, 3, 3, device="meta", dtype=torch.float16)
        x = torch.empty(4, 64, 32, 32, device="meta", dtype=torch.float16, requires_grad=True)
        with LiveBytes() as live:
            with autocast_on_meta(torch.float16) if emulate else torch.enable_grad():
                h = x
                for _ in range(4):
                    h = F.conv2d(F.silu(F.group_norm(h, 8)), conv, padding=1)
        return live.peak

    # each block saves its norm's float32 input copy and the float32 SiLU input beside the 16-bit conv input
    assert peak(True) > 1.5 * peak(False)


def test_a_quantized_layer_on_meta_saves_no_expanded_weight():
    """bitsandbytes saves its packed weight for the backward, not the expanded one: on meta the
    expanded weight is a temporary of the forward and of the backward. Kept for every layer, it
    made a Flux NF4 estimate 30 GB where an H200 measured 16.5."""
    layers = [SimpleNamespace(out_features=1024, in_features=1024, bias=None) for _ in range(8)]
    x = torch.empty(2, 1024, device="meta", dtype=torch.bfloat16, requires_grad=True)
    with LiveBytes() as live:
        h = x
        for layer in layers:
            h = _meta_linear(layer, None, None, h)
        h.float().sum().backward()
    one_weight = 1024 * 1024 * 2
    assert h.dtype == torch.bfloat16 and x.grad is not None
    assert live.peak < 2 * one_weight  # one layer's expanded weight at a time, not eight


def test_a_bitsandbytes_layer_returns_the_autocast_type_as_a_linear_layer_does():
    """bitsandbytes returns its input's type: after autocast's float32 norms a Flux NF4 step stayed
    in float32 (activations 1.5x BFLOAT_16's on an H200). The layer now takes its input in the
    autocast type, as autocast gives a linear layer: the same product, the output in bfloat16."""
    from ot_gradio.config.enums import DataType
    from ot_gradio.training.quantize import _bnb_linear

    torch.manual_seed(0)
    plain = torch.nn.Linear(64, 32)
    layer = _bnb_linear(plain, DataType.NFLOAT_4, torch.bfloat16).to("cpu")  # bitsandbytes quantizes on the move
    x = torch.randn(3, 64)  # float32, as a float32 norm leaves it
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
        theirs = type(layer).forward(layer, x)  # bitsandbytes' own forward
    assert out.dtype == torch.bfloat16 and theirs.dtype == torch.float32
    torch.testing.assert_close(out.float(), theirs)
    assert layer(x).dtype == torch.float32  # without autocast: as before
