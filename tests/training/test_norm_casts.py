"""Frozen 16-bit norm weights cast to float32 once a step (training/norm_casts.py): the same
numbers as autocast's casts at each call, two copies fewer per norm, and the modules as they were
outside the step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.step_operators import OperatorCount
from ot_gradio.training.norm_casts import affine_norms, step_norms
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
            with step_norms(norms, dtype, torch.device("cpu")):
                out = unet(latents, torch.tensor([10, 700]), text).sample
                out.float().square().mean().backward()
    grads = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return out.detach(), grads, ops.counts["_to_copy"]


def test_a_bfloat16_step_computes_the_same_with_two_copies_fewer_per_norm():
    """As on a GPU (16-bit UNet, norms in float32 as CUDA's autocast runs them), in bfloat16: the
    same output and gradients, bit for bit, and the weight's and the bias's copies of each norm
    replaced by one cast for all; afterwards the norms hold their own 16-bit weights and forward
    again."""
    unet, params = _unet_with_lora(torch.bfloat16)
    norms = affine_norms([unet])
    assert {type(n) for n in norms} == {nn.GroupNorm, nn.LayerNorm}
    weights = [(n.weight, n.bias) for n in norms]
    out, grads, once = _step(unet, params, torch.bfloat16, norms)
    ref_out, ref_grads, each = _step(unet, params, torch.bfloat16)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=0, atol=0)
    assert each - once == 2 * len(norms) - 1, (each, once, len(norms))  # one cast (of the concatenation) for all
    assert [(n.weight, n.bias) for n in norms] == weights and all(n.weight.dtype == torch.bfloat16 for n in norms)
    assert not any("forward" in n.__dict__ for n in norms)


def test_a_float16_step_runs_the_norms_in_float16_without_copies():
    """In float16 the frozen norms run in float16 (the kernels accumulate in float32): none of the
    input's, weights' and output's copies nor their gradients' (at least four a norm), and the
    LoRA gradients as close to a float32 step's as autocast's float32 norms give them (0.207 %
    against 0.196 % here)."""
    unet, params = _unet_with_lora(torch.float32)
    g = torch.Generator().manual_seed(1)
    size = unet.config.sample_size
    latents = torch.randn(2, unet.config.in_channels, size, size, generator=g)
    text = torch.randn(2, 7, unet.config.cross_attention_dim, generator=g)
    truth_out = unet(latents, torch.tensor([10, 700]), text).sample
    truth_out.square().mean().backward()
    truth = [p.grad.clone() for p in params]
    for p in unet.parameters():
        p.grad = None
        if not p.requires_grad:
            p.data = p.data.half()
    norms = affine_norms([unet])
    out, grads, once = _step(unet, params, torch.float16, norms)
    ref_out, ref_grads, each = _step(unet, params, torch.float16)
    assert out.dtype == ref_out.dtype == torch.float16
    assert each - once >= 4 * len(norms), (each, once, len(norms))

    def error(gs):
        return (sum(float((a - t).square().sum()) for a, t in zip(gs, truth, strict=True)) / sum(float(t.square().sum()) for t in truth)) ** 0.5

    assert error(grads) < 1.15 * error(ref_grads), (error(grads), error(ref_grads))
    out_error, ref_error = (float((o.float() - truth_out.detach()).abs().max()) for o in (out, ref_out))
    assert out_error < 1.6 * ref_error, (out_error, ref_error)


def test_outside_autocast_a_norm_runs_as_it_is():
    """A part run with autocast off inside the step (fp16_fallback.py's FLOAT_32 on a CPU) gets the
    module's own forward: its 16-bit weights, its output type."""
    norm = nn.LayerNorm(16).to(torch.bfloat16).requires_grad_(False)
    nn.init.normal_(norm.weight)
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    with step_norms([norm], torch.bfloat16, torch.device("cpu")):
        assert "forward" in norm.__dict__
        with torch.autocast("cpu", enabled=False):
            off = norm(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            on = norm(x)
    torch.testing.assert_close(off, nn.LayerNorm.forward(norm, x), rtol=0, atol=0)
    expected = torch.nn.functional.layer_norm(x, (16,), norm.weight.float(), norm.bias.float(), norm.eps)
    torch.testing.assert_close(on, expected, rtol=0, atol=0)
    half = nn.GroupNorm(2, 8).half().requires_grad_(False)
    nn.init.normal_(half.weight)
    y = torch.randn(2, 8, 3, 3, dtype=torch.float16)
    with step_norms([half], torch.float16, torch.device("cpu")), torch.autocast("cpu", dtype=torch.float16):
        out16, out32 = half(y), half(y.float())  # float16 in: float16 through; a float32 input: float32 weights
    torch.testing.assert_close(out16, nn.GroupNorm.forward(half, y), rtol=0, atol=0)
    assert out16.dtype == torch.float16 and out32.dtype == torch.float32
    torch.testing.assert_close(out32, torch.nn.functional.group_norm(y.float(), 2, half.weight.float(), half.bias.float()), rtol=0, atol=0)


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
    with step_norms([trained, full, wrapped, frozen], torch.float16, torch.device("cpu")):
        assert "forward" not in trained.__dict__ and "forward" not in full.__dict__ and "forward" in frozen.__dict__
        assert wrapped(torch.ones(1)).item() == 1.0  # its own wrapper kept
    assert "forward" in wrapped.__dict__ and "forward" not in frozen.__dict__
    with step_norms([frozen], None, torch.device("cpu")):  # no autocast: nothing
        assert "forward" not in frozen.__dict__


def test_the_memory_probe_runs_its_meta_step_as_the_step_runs_the_norms():
    """On meta, under the probe's emulation of CUDA autocast in float16 (meta_autocast.py), frozen
    float16 norms run in float16 (what the step keeps is float16: a ResNet block keeps about half
    the bytes); in bfloat16 they stay float32 (autocast's numbers, the weights' copies made once)."""
    from ot_gradio.training.memory_probe import LiveBytes
    from ot_gradio.training.meta_autocast import autocast_on_meta

    def run(dtype, on):
        with torch.device("meta"):
            norms = [nn.GroupNorm(8, 64).to(dtype).requires_grad_(False) for _ in range(4)]
            conv = torch.empty(64, 64, 3, 3, dtype=dtype)
            x = torch.empty(4, 64, 32, 32, dtype=dtype, requires_grad=True)
        with LiveBytes() as live, autocast_on_meta(dtype), step_norms(norms if on else [], dtype, torch.device("meta")):
            h = x
            for norm in norms:
                h = torch.nn.functional.conv2d(torch.nn.functional.silu(norm(h)), conv, padding=1)
            after_norm = torch.nn.functional.silu(norms[0](x)).dtype
        return live.peak, after_norm

    (half, half_type), (autocast, autocast_type) = run(torch.float16, True), run(torch.float16, False)
    assert half_type == torch.float16 and autocast_type == torch.float32
    assert half < 0.6 * autocast, (half, autocast)
    (bf16, bf16_type), (bf16_autocast, _) = run(torch.bfloat16, True), run(torch.bfloat16, False)
    assert bf16_type == torch.float32 and abs(bf16 - bf16_autocast) < 0.001 * bf16_autocast  # the weights' copies aside


@pytest.mark.parametrize("checkpointing", ["OFF", "ON"])  # ON: the backward recomputes blocks, norms included
def test_a_float16_run_trains_as_with_autocasts_float32_norms(tiny_model, four_shapes, tmp_path, checkpointing):
    """Through the trainer, as on a GPU (FLOAT_16, the UNet and text encoder in float16, their
    LoRA training), with the same noise and timestep every step: the loss falls, and the losses
    are those of the same run with autocast's float32 norms within float16's rounding."""
    from bench.gpu_check import fixed_noise
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import RunPaths, Trainer
    from tests.trainer_runs import Losses, tiny_sd15_lora_config

    runs = []
    for half in (True, False):
        work = tmp_path / str(half)
        config = tiny_sd15_lora_config(
            tiny_model, four_shapes, work, train_dtype="FLOAT_16", batch_size=4, epochs=6, learning_rate=3e-3, lora_alpha=4,
            text_encoder={"train": True, "weight_dtype": "FLOAT_16"}, unet={"weight_dtype": "FLOAT_16", "gradient_checkpointing": checkpointing})
        report = Losses()
        with as_on_a_gpu():
            trainer = Trainer(load_config(config).config, RunPaths(work / "s", work / "b", work / "o", None, []), report,
                              noise_fn=fixed_noise)
            trainer.setup()
            assert trainer.precision.dtype == torch.float16 and len(trainer.frozen_norms) > 50
            assert trainer.checkpointing.get(trainer.model.denoiser, False) == (checkpointing == "ON")
            if not half:
                trainer.frozen_norms = []
            assert trainer.train() == "done"
        runs.append(report.losses)
    losses, autocast_losses = runs
    assert len(losses) == 6 and all(b < a for a, b in zip(losses, losses[1:], strict=False)) and losses[-1] < 0.85 * losses[0], losses
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(autocast_losses), rtol=2e-2, atol=1e-3)
