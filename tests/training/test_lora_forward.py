"""The shorter forward of plain LoRA layers (training/lora_forward.py): the same outputs and
gradients as peft's own forward, installed only where it fits, and peft's forward whenever
adapters are turned off, merged or given extra arguments."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from torch import nn

from bench.step_operators import OperatorCount  # counts the operators a step runs (what a GPU launches, views aside)
from ot_gradio.training.lora import add_lora, lora_layers
from ot_gradio.training.lora_forward import install_lora_forward
from ot_gradio.training.lora_variants import AdapterSpec


def _unet():
    from ot_gradio.models.tiny.sd15 import tiny_sd15_unet

    return tiny_sd15_unet(seed=0)


def _inputs(unet):
    g = torch.Generator().manual_seed(1)
    size = unet.config.sample_size
    latents = torch.randn(2, unet.config.in_channels, size, size, generator=g)
    text = torch.randn(2, 7, unet.config.cross_attention_dim, generator=g)
    return latents, torch.tensor([10, 700]), text


def _with_lora(dtype=torch.float32, dropout=0.0, spec=None):
    """The tiny UNet with the full preset, alpha != rank (scaling 0.25) and non-zero up weights."""
    unet = _unet()
    params = add_lora(unet, kind="unet", rank=4, alpha=1.0, dropout=dropout, layer_preset="full", dtype=dtype, spec=spec)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return unet, params


def _peft_forward(unet):
    """The same model with every layer back on peft's forward."""
    other = copy.deepcopy(unet)
    for layer in lora_layers(other).values():
        layer.__dict__.pop("forward", None)
    return other


def _step(unet, params):
    latents, t, text = _inputs(unet)
    out = unet(latents, t, text).sample
    out.float().square().mean().backward()
    grads = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return out.detach(), grads


def _trained(unet):
    return [p for n, p in unet.named_parameters() if p.requires_grad]


def test_plain_lora_layers_get_it_and_compute_what_peft_computes():
    unet, _ = _with_lora()
    layers = lora_layers(unet)
    assert layers and all("forward" in layer.__dict__ for layer in layers.values())
    kinds = {type(layer.get_base_layer()) for layer in layers.values()}
    assert kinds == {nn.Linear, nn.Conv2d}
    reference = _peft_forward(unet)
    assert not any("forward" in layer.__dict__ for layer in lora_layers(reference).values())
    out, grads = _step(unet, _trained(unet))
    ref_out, ref_grads = _step(reference, _trained(reference))
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-7)
    assert max(g.abs().max().item() for g in grads) > 0


def test_lora_weights_in_another_dtype_than_the_model():
    """peft casts the input to the LoRA weights' dtype and the sum back to the layer's."""
    unet, _ = _with_lora(dtype=torch.float64)
    reference = _peft_forward(unet)
    out, grads = _step(unet, _trained(unet))
    ref_out, ref_grads = _step(reference, _trained(reference))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref_out)
    for g, r in zip(grads, ref_grads, strict=True):
        assert g.dtype == torch.float64
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize("case", ["dropout", "dora"])
def test_layers_it_does_not_fit_keep_pefts_forward(case):
    unet, _ = _with_lora(dropout=0.1) if case == "dropout" else _with_lora(spec=AdapterSpec(decompose=True))
    assert not any("forward" in layer.__dict__ for layer in lora_layers(unet).values())
    assert install_lora_forward(list(lora_layers(unet).values())) == 0


def test_turned_off_merged_or_scaled_adapters_go_through_peft():
    unet, _ = _with_lora()
    latents, t, text = _inputs(unet)
    layers = list(lora_layers(unet).values())
    with torch.no_grad():
        with_lora = unet(latents, t, text).sample
        for layer in layers:
            layer.enable_adapters(False)
        off = unet(latents, t, text).sample
        for layer in layers:
            layer.enable_adapters(True)
        base = _unet()(latents, t, text).sample
        torch.testing.assert_close(off, base)
        assert (with_lora - base).abs().max() > 1e-4

        for layer in layers:
            layer.merge()
        merged = unet(latents, t, text).sample
        for layer in layers:
            layer.unmerge()
        torch.testing.assert_close(merged, with_lora, rtol=1e-4, atol=1e-5)

        for layer in layers:  # the scaling is read at every call (diffusers' lora scale)
            layer.scale_layer(0.0)
        torch.testing.assert_close(unet(latents, t, text).sample, base)


def test_under_bfloat16_autocast_as_training_on_a_gpu_runs():
    """The train data type's autocast (CPU's bfloat16 here): the same dtypes and values as peft's."""
    unet, _ = _with_lora()
    reference = _peft_forward(unet)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = _step(unet, _trained(unet))
        ref_out, ref_grads = _step(reference, _trained(reference))
    assert out.dtype == ref_out.dtype
    torch.testing.assert_close(out, ref_out)
    for g, r in zip(grads, ref_grads, strict=True):
        assert g.dtype == r.dtype == torch.float32
        torch.testing.assert_close(g, r)


def test_a_compiled_step_asks_no_untraceable_autocast_question(monkeypatch):
    """`compile`: each LoRA layer asks which type autocast computes in; torch 2.11's dynamo cannot
    trace `torch.amp.is_autocast_available` (on an H200 a graph break in every layer, whose resumed
    halves recompiled per layer shape until the recompile limit left the UNet eager). Asked once
    per device type, before any step; the step then compiles as one graph."""
    unet, params = _with_lora()

    def untraceable(kind):
        raise AssertionError(f"torch.amp.is_autocast_available({kind!r}) asked during a step")

    monkeypatch.setattr(torch.amp, "is_autocast_available", untraceable)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = _step(unet, params)
    assert out.dtype == torch.bfloat16 and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
    monkeypatch.undo()
    torch._dynamo.reset()
    compiled = torch.compile(unet, backend="eager", fullgraph=True)  # a graph break fails here
    with torch.autocast("cpu", dtype=torch.bfloat16):
        latents, t, text = _inputs(unet)
        assert compiled(latents, t, text).sample.dtype == torch.bfloat16
    torch._dynamo.reset()


def test_a_16_bit_model_with_float32_lora_under_autocast_casts_less_than_peft():
    """SD 1.5's preset on a GPU: the UNet in 16 bits, the LoRA weights in float32, autocast in 16
    bits. peft casts each layer's input up to float32 and autocast casts it back down for the
    product; the shorter forward leaves the first cast out: the same values and gradients, and
    per layer two copies fewer (a forward and its backward), which a GPU step bound by launching
    kernels pays for."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Copies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += func is torch.ops.aten._to_copy.default
            return func(*args, **(kwargs or {}))

    unet, _ = _with_lora()
    for p in unet.parameters():
        if not p.requires_grad:
            p.data = p.data.to(torch.bfloat16)
    reference = _peft_forward(unet)
    counts = []
    results = []
    for model in (unet, reference):
        with torch.autocast("cpu", dtype=torch.bfloat16), Copies() as copies:
            results.append(_step(model, _trained(model)))
        counts.append(copies.count)
    (out, grads), (ref_out, ref_grads) = results
    assert out.dtype == ref_out.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref_out)
    for g, r in zip(grads, ref_grads, strict=True):
        assert g.dtype == r.dtype == torch.float32
        torch.testing.assert_close(g, r)
    assert counts[0] <= counts[1] - 2 * len(lora_layers(unet)), counts


def test_meta_inputs_in_another_type_than_the_lora_run():
    """The memory planner's probe runs the layers on meta tensors, which have no autocast to ask
    about ("unknown device type for autocast"): the input is cast as peft casts it."""
    unet, _ = _with_lora()
    layer = next(layer for layer in lora_layers(unet).values() if isinstance(layer.get_base_layer(), nn.Linear))
    base = layer.get_base_layer()
    x = torch.empty(2, base.in_features, device="meta", dtype=torch.bfloat16)
    layer.to("meta")
    assert layer(x).shape == (2, base.out_features)


def _float32_casts_step_as_peft(unet, reference, layers):
    """A step of `unet` under float32 `step_casts` of `layers` computes `reference`'s (peft's) outputs and gradients."""
    from ot_gradio.training.lora_forward import step_casts

    with step_casts(layers, torch.float32, torch.device("cpu")):
        out, grads = _step(unet, _trained(unet))
    ref_out, ref_grads = _step(reference, _trained(reference))
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("alpha", [1.0, 3.0])  # scaling 0.25 (a power of two) and 0.75
def test_weights_cast_once_a_step_compute_what_peft_computes(alpha):
    """`step_casts` in float32: the down weights scaled once, the up product and the sum in one
    addmm; the same outputs and gradients as peft's forward."""
    from ot_gradio.training.lora_forward import cast_once_layers

    unet, _ = _with_lora()
    for layer in lora_layers(unet).values():
        layer.set_scale("default", 1.0)  # peft's scaling = alpha / rank, as add_lora made it with alpha 1
        layer.scaling["default"] *= alpha
    reference = _peft_forward(unet)
    layers = cast_once_layers([unet])
    assert len(layers) == len(lora_layers(unet))
    _float32_casts_step_as_peft(unet, reference, layers)


def test_under_autocast_each_weight_is_cast_once_and_the_step_is_as_exact():
    """SD 1.5's preset on a GPU (16-bit UNet, float32 LoRA, 16-bit autocast; bfloat16 on the CPU):
    without `step_casts` autocast copies each LoRA weight per call and its gradient back (four
    copies a layer) and the scaling is a multiplication of its own; with it, a few operations cast
    them all. Against a float32 step of the same model, the gradients are as close as peft's."""
    from ot_gradio.training.lora_forward import cast_once_layers, step_casts

    unet, _ = _with_lora()
    reference = _peft_forward(unet)
    truth_out, truth = _step(reference, _trained(reference))
    for model in (unet, reference):
        for p in model.parameters():
            if not p.requires_grad:
                p.data = p.data.to(torch.bfloat16)
    layers = cast_once_layers([unet])
    results, counts = [], []
    for model, casts in ((unet, lambda: step_casts(layers, torch.bfloat16, torch.device("cpu"))), (unet, contextlib.nullcontext),
                         (reference, contextlib.nullcontext)):
        with torch.autocast("cpu", dtype=torch.bfloat16), OperatorCount() as ops, casts():
            results.append(_step(model, _trained(model)))
        counts.append(ops.counts)
    once, each, peft = counts
    # the UNet's own casts (time embedding, norms) are in both; `step_casts` adds two (there and back)
    assert each["_to_copy"] - once["_to_copy"] >= 4 * len(layers) - 2, (once["_to_copy"], each["_to_copy"])
    assert sum(once.values()) <= sum(each.values()) - 5 * len(layers), (sum(once.values()), sum(each.values()))

    def error(result):
        out, grads = result
        assert out.dtype == torch.bfloat16 and all(g.dtype == torch.float32 for g in grads)
        squared = sum(float((g - t).square().sum()) for g, t in zip(grads, truth, strict=True))
        return (squared / sum(float(t.square().sum()) for t in truth)) ** 0.5, float((out.float() - truth_out).abs().max())

    (grad_once, out_once), (_, _), (grad_peft, out_peft) = map(error, results)
    assert grad_once < 1.5 * grad_peft and out_once < 1.5 * out_peft, (grad_once, grad_peft, out_once, out_peft)


def test_weights_not_run_in_the_step_get_no_gradient_and_other_autocast_types_read_the_weights():
    """A layer the step does not run keeps grad None (an optimizer then leaves it alone, weight
    decay included); a layer run with autocast off (fp16_fallback) reads its float32 weights."""
    from ot_gradio.training.lora_forward import cast_once_layers, step_casts

    unet, _ = _with_lora()
    layers = [layer for layer in lora_layers(unet).values() if isinstance(layer.get_base_layer(), nn.Linear)]
    run, skipped, off = layers[0], layers[1], layers[2]
    x = torch.randn(3, run.get_base_layer().in_features)
    x_off = torch.randn(3, off.get_base_layer().in_features)
    with step_casts(cast_once_layers([unet]), torch.bfloat16, torch.device("cpu")):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = run(x)
            with torch.autocast("cpu", enabled=False):
                y_off = off(x_off)
        assert y.dtype == torch.bfloat16 and y_off.dtype == torch.float32
        (y.float().sum() + y_off.sum()).backward()
    for layer, got in ((run, True), (skipped, False), (off, True)):
        for p in (layer.lora_A["default"].weight, layer.lora_B["default"].weight):
            assert (p.grad is not None) == got
    expected = off.lora_A["default"].weight.detach().clone().requires_grad_(True)
    ((x_off @ expected.t()) @ off.lora_B["default"].weight.detach().t() * off.scaling["default"]).sum().backward()
    torch.testing.assert_close(off.lora_A["default"].weight.grad, expected.grad)


def test_layers_of_several_scalings_some_not_run_get_what_peft_gives():
    """`step_casts` lays the down weights out by scaling (one multiplication a scaling) and sends
    back only the gradients that came: layers of two scalings, some run and some not, get peft's
    gradients, and the others none."""
    from ot_gradio.training.lora_forward import cast_once_layers, step_casts

    unet, _ = _with_lora()
    reference = _peft_forward(unet)
    for model in (unet, reference):
        for i, layer in enumerate(lora_layers(model).values()):
            layer.scaling["default"] *= 3.0 if i % 2 else 1.0
    linear = [name for name, layer in lora_layers(unet).items() if isinstance(layer.get_base_layer(), nn.Linear)]
    run = linear[:4]  # two of each scaling
    results = []
    for model in (unet, reference):
        layers = lora_layers(model)
        x = torch.randn(3, layers[run[0]].get_base_layer().in_features, generator=torch.Generator().manual_seed(3))
        casts = step_casts(cast_once_layers([model]), torch.float32, torch.device("cpu")) if model is unet else contextlib.nullcontext()
        with casts:
            sum(layers[name](x if layers[name].in_features == x.shape[1] else x[:, :1].expand(3, layers[name].in_features)).square().sum()
                for name in run).backward()
        results.append({name: (layer.lora_A["default"].weight.grad, layer.lora_B["default"].weight.grad) for name, layer in layers.items()})
    ours, theirs = results
    for name in ours:
        if name in run:
            for g, r in zip(ours[name], theirs[name], strict=True):
                torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
        else:
            assert ours[name] == (None, None)


def test_frozen_lora_weights_are_cast_once_a_step_too():
    """A text encoder past its `stop_training_after` keeps its LoRA, frozen, and runs without
    gradients at every step while its captions cannot be cached: `step_casts` casts those weights
    once a step as well (no autograd node), where autocast copied both of them at every call. In
    float32 the frozen layers compute peft's outputs and the layers still training get peft's
    gradients; under a 16-bit autocast the frozen calls copy no weight."""
    from ot_gradio.training.lora_forward import cast_once_layers, step_casts

    unet, _ = _with_lora()
    reference = _peft_forward(unet)
    for model in (unet, reference):  # the down blocks' LoRA stops training, the rest trains on
        for name, p in model.named_parameters():
            if p.requires_grad and name.startswith("down_blocks."):
                p.requires_grad_(False)
    frozen = [layer for name, layer in lora_layers(unet).items() if name.startswith("down_blocks.")]
    assert frozen and len(frozen) < len(lora_layers(unet))
    layers = cast_once_layers([unet])
    _float32_casts_step_as_peft(unet, reference, layers)
    assert all(p.grad is None for layer in frozen for p in layer.parameters())

    for p in unet.parameters():  # the whole model frozen, run as a stopped text encoder runs
        p.requires_grad_(False)
    outputs, copies = [], []
    for casts in (lambda: step_casts(layers, torch.bfloat16, torch.device("cpu")), contextlib.nullcontext):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), OperatorCount() as ops, casts():
            outputs.append(unet(*_inputs(unet)).sample.float())
        copies.append(ops.counts["_to_copy"])
    once, each = copies
    assert once <= each - 2 * len(layers) + 1, (once, each)  # one cast for all, where each call cast both weights
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0.05, atol=0.02)


def test_a_weight_on_cuda_0_is_on_the_trainers_cuda_device():
    """The trainer's device is "cuda"; its weights report "cuda:0" (`!=` says they differ: on an
    H200 that left the casts per layer)."""
    from ot_gradio.training.lora_forward import on_device

    class OnCard:
        def __init__(self, device):
            self.device = torch.device(device)

    assert on_device(OnCard("cuda:0"), torch.device("cuda")) and on_device(OnCard("cuda:1"), torch.device("cuda:1"))
    assert not on_device(OnCard("cuda:1"), torch.device("cuda:0")) and not on_device(OnCard("cpu"), torch.device("cuda"))
    assert on_device(torch.zeros(1), torch.device("cpu"))


@pytest.mark.parametrize("kind", [nn.Linear, nn.Conv2d])
def test_a_float32_input_is_cast_once_for_the_base_and_the_adapter(kind):
    """After a float32 norm (autocast runs norms in float32 on a GPU) the input of a LoRA layer is
    float32: autocast would cast it for the base product and again for the adapter's, and both
    gradients back; cast once, the output is the same and two copies of it fewer are made."""
    from torch.utils._python_dispatch import TorchDispatchMode

    unet, _ = _with_lora()
    layer = next(layer for layer in lora_layers(unet).values() if type(layer.get_base_layer()) is kind)
    base = layer.get_base_layer()
    for p in base.parameters():
        p.data = p.data.to(torch.bfloat16)
    reference = copy.deepcopy(layer)
    reference.__dict__.pop("forward", None)  # peft's forward
    shape = (2, 5, base.in_features) if kind is nn.Linear else (2, base.in_channels, 6, 6)

    class InputCopies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default and tuple(args[0].shape) == shape:
                self.count += 1
            return func(*args, **(kwargs or {}))

    outputs, counts = [], []
    for module in (layer, reference):
        leaf = torch.randn(shape, generator=torch.Generator().manual_seed(3), requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16), InputCopies() as copies:
            x = leaf * 1.0  # an activation (autocast keeps the casts of leaf tensors that train for the pass)
            y = module(x)
            y.float().square().sum().backward()
        outputs.append((y, leaf.grad))
        counts.append(copies.count)
    (y, grad), (ref_y, ref_grad) = outputs
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(grad, ref_grad, rtol=2e-2, atol=1e-3)  # the two gradients are summed in bfloat16 now
    assert counts[0] == 2 and counts[1] >= 4, counts  # the input down and its gradient up, once each


def test_the_memory_probe_sees_the_input_cast_as_training_on_a_gpu_does():
    """On meta, under the probe's emulation of CUDA autocast (meta_autocast.py), a float32 input is
    cast once for both products and a 16-bit one is not cast up to the adapter's float32: the copies
    the probe counts are those a GPU step makes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from ot_gradio.training.meta_autocast import autocast_on_meta

    unet, _ = _with_lora()
    layer = next(layer for layer in lora_layers(unet).values() if type(layer.get_base_layer()) is nn.Linear)
    layer.to("meta")

    class Copies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.dtypes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default and tuple(args[0].shape) == (3, features):  # the input's, not the weights
                self.dtypes.append((args[0].dtype, kwargs.get("dtype")))
            return func(*args, **(kwargs or {}))

    features = layer.get_base_layer().in_features
    for dtype, expected in ((torch.float32, [(torch.float32, torch.bfloat16)]), (torch.bfloat16, [])):
        x = torch.empty(3, features, device="meta", dtype=dtype)
        with autocast_on_meta(torch.bfloat16), Copies() as copies:
            y = layer(x)
        assert y.dtype == torch.bfloat16 and copies.dtypes == expected, (dtype, copies.dtypes)


def test_a_training_run_with_the_weights_cast_once_trains_as_one_without(tiny_model, four_shapes, tmp_path, monkeypatch):
    """Through the trainer, in bfloat16 with the text encoder's LoRA training too and gradient
    checkpointing on (the backward recomputes blocks that read the step's cast weights): the same
    losses and LoRA weights as the same run with each layer casting its own, within bfloat16's
    rounding."""
    from safetensors.torch import load_file

    from ot_gradio.config.io import load_config
    from ot_gradio.training import lora_forward
    from ot_gradio.training.trainer import RunPaths, Trainer
    from tests.trainer_runs import Losses, tiny_sd15_lora_config

    casts = []
    apply = lora_forward._CastOnce.apply
    monkeypatch.setattr(lora_forward._CastOnce, "apply", lambda *a: casts.append(len(a) - 2) or apply(*a))
    results = []
    for once in (True, False):
        work = tmp_path / str(once)
        config = tiny_sd15_lora_config(
            tiny_model, four_shapes, work, train_dtype="BFLOAT_16", batch_size=2, epochs=2, learning_rate=1e-3, lora_alpha=1,
            text_encoder={"train": True}, unet={"train": True, "gradient_checkpointing": "ON"}, backup_before_save=False)
        report = Losses()
        trainer = Trainer(load_config(config).config, RunPaths(work / "s", work / "b", work / "o", None, []), report)
        trainer.setup()
        assert len(trainer.cast_once) > 100
        layers = len(trainer.cast_once)
        if not once:
            trainer.cast_once = []
        before = len(casts)
        assert trainer.train() == "done"
        assert (len(casts) > before) == once  # one cast of every trained LoRA weight per step
        results.append((report.losses, load_file(str(work / "out" / "lora.safetensors"))))
    assert len(casts) == 4 and all(n == 2 * layers for n in casts), (casts, layers)  # every step, every layer's two weights
    (losses, weights), (ref_losses, ref_weights) = results
    assert len(losses) == len(ref_losses) == 4
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=3e-2, atol=1e-3)
    assert weights.keys() == ref_weights.keys()
    ups = [k for k in weights if "lora_up" in k or "lora_B" in k]
    assert ups and sum(bool(weights[k].abs().max() > 0) for k in ups) > 0.9 * len(ups)  # up weights start at zero: trained
    # AdamW's first steps move a weight by about the learning rate whatever its gradient's size, so
    # a rounding flip of a tiny gradient shows: compared over all the trained weights together
    for kind in ("lora_down", "lora_up"):  # SAFETENSORS, the default: kohya keys for SD 1.5
        keys = [k for k in weights if kind in k]
        diff = sum(float((weights[k].float() - ref_weights[k].float()).square().sum()) for k in keys) ** 0.5
        size = sum(float(ref_weights[k].float().square().sum()) for k in keys) ** 0.5
        assert diff < 0.05 * size, (kind, diff / size)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_linear_lora_layer_in_a_step_is_one_autograd_node(dtype, monkeypatch):
    """In a step (`step_casts`), a LoRA Linear whose base weights, input and cast LoRA weights are
    of one type is one autograd node (`_LoraLinear`): the same output, the same gradients (float32)
    or as close to a float32 step as before (bfloat16, whose sum of the input's two gradients is
    now inside one product), and per layer one operation fewer (that sum)."""
    from ot_gradio.training import lora_forward
    from ot_gradio.training.lora_forward import cast_once_layers, step_casts

    unet, _ = _with_lora()
    reference = _peft_forward(unet)
    truth_out, truth = _step(reference, _trained(reference))
    for p in unet.parameters():
        if not p.requires_grad:
            p.data = p.data.to(dtype)
    layers = cast_once_layers([unet])
    linear = [layer for layer in layers if type(layer.get_base_layer()) is nn.Linear]
    autocast = torch.autocast("cpu", dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    results, counts, nodes = [], [], []
    one_node, apply = lora_forward._one_node, lora_forward._LoraLinear.apply
    inputs_that_train = []  # the sum of the input's two gradients is left out where there is one
    monkeypatch.setattr(lora_forward._LoraLinear, "apply", lambda x, *a: inputs_that_train.append(x.requires_grad) or apply(x, *a))
    for fused in (True, False):
        monkeypatch.setattr(lora_forward, "_one_node", one_node if fused else lambda *a: False)
        with autocast, OperatorCount() as ops, step_casts(layers, dtype, torch.device("cpu")):
            latents, t, text = _inputs(unet)
            out = unet(latents, t, text).sample
            nodes.append(_node_names(out.grad_fn))
            out.float().square().mean().backward()
        params = _trained(unet)
        results.append((out.detach(), [p.grad.clone() for p in params]))
        for p in params:
            p.grad = None
        counts.append(ops.counts)
    (out, grads), (ref_out, ref_grads) = results
    assert nodes[0]["_LoraLinearBackward"] == len(linear) and "_LoraLinearBackward" not in nodes[1], nodes[0]
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    if dtype == torch.float32:
        for g, r in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-7)
    else:
        def error(gs):
            return sum(float((g - t).square().sum()) for g, t in zip(gs, truth, strict=True)) ** 0.5

        assert error(grads) < 1.2 * error(ref_grads), (error(grads), error(ref_grads))
    fused_counts, plain_counts = counts
    summed = sum(inputs_that_train)
    assert len(inputs_that_train) == len(linear) and summed > len(linear) / 2
    assert plain_counts["add"] - fused_counts["add"] == summed, (fused_counts["add"], plain_counts["add"], summed)
    assert sum(fused_counts.values()) == sum(plain_counts.values()) - summed
    assert truth_out.shape == out.shape


def test_the_one_node_layer_leaves_what_it_cannot_compute_to_the_products():
    """A base weight of another type than the input (autocast would cast it; the backward runs
    without autocast), a base weight or bias that trains, or a base layer that is not exactly
    nn.Linear (a quantized one): not one node."""
    from ot_gradio.training.lora_forward import _one_node

    x = torch.randn(2, 8, dtype=torch.bfloat16)
    down = torch.randn(4, 8, dtype=torch.bfloat16)

    def base(dtype=torch.bfloat16, train_weight=False, train_bias=False, bias=True, cls=nn.Linear):
        layer = cls(8, 6, bias=bias).to(dtype)
        layer.weight.requires_grad_(train_weight)
        if bias:
            layer.bias.requires_grad_(train_bias)
        return layer

    class Quantized(nn.Linear):
        pass

    assert _one_node(base(), x, down) and _one_node(base(bias=False), x, down)
    assert not _one_node(base(torch.float32), x, down)
    assert not _one_node(base(), x, down.float())
    assert not _one_node(base(train_weight=True), x, down) and not _one_node(base(train_bias=True), x, down)
    assert not _one_node(base(cls=Quantized), x, down)


def _node_names(fn):
    from collections import Counter

    seen, names, stack = set(), Counter(), [fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names[type(node).__name__] += 1
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return names
