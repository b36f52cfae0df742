"""Every quantized weight type the page offers for a part (FLOAT_8, INT_8, NFLOAT_4, INT_W8A8, FLOAT_W8A8) on every
kind of part a LoRA trains on top of (a UNet, a transformer, CLIP, T5, a Qwen3 language model):
the training step through the real path (configure_model, the LORA method's setup, DiffusionStep's
loss, backward) on a tiny model on the CPU gives finite, non-zero gradients for the LoRA weights
and none for the frozen quantized weights under them. (Only frozen parts may be quantized:
test_model_options.py checks the refusal of a quantized part that trains itself.)"""

from __future__ import annotations

import functools

import pytest
import torch

from ot_gradio.config.catalogue import offered as page_offers
from ot_gradio.config.enums import DataType
from ot_gradio.config.schema import TrainConfig
from ot_gradio.data.batches import Batch
from ot_gradio.training.device import Precision
from ot_gradio.training.diffusion import DiffusionStep, check_quantized_parts_frozen, configure_model
from ot_gradio.training.methods import get_method
from ot_gradio.training.quantize import QUANTIZED, w8a8_kernel_problem

CPU = torch.device("cpu")
STORED = (torch.float8_e4m3fn, torch.int8, torch.uint8)


def _sd15():
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    return StableDiffusion15(**tiny_sd15_components())


def _flux():
    from ot_gradio.models.flux import FluxDev1
    from ot_gradio.models.tiny.flux import tiny_flux_components

    return FluxDev1(tiny_flux_components())


def _z_image():
    from ot_gradio.models.tiny.z_image import tiny_z_image_components
    from ot_gradio.models.z_image import ZImage

    return ZImage(tiny_z_image_components())


# (model type, builder, part, what the part is)
PARTS = [
    ("STABLE_DIFFUSION_15", _sd15, "unet", "UNet"),
    ("STABLE_DIFFUSION_15", _sd15, "text_encoder", "CLIP"),
    ("FLUX_DEV_1", _flux, "transformer", "DiT"),
    ("FLUX_DEV_1", _flux, "text_encoder_2", "T5"),
    ("Z_IMAGE", _z_image, "text_encoder", "Qwen3"),
]


def test_the_page_offers_these_quantized_types():
    """Every weight type the page offers a part beyond the float ones is quantized here (GGUF, the
    transformer's from a .gguf file, is offered per family: tests/models/test_gguf_transformer.py)."""
    offered = {t for t in page_offers(DataType) if t not in (DataType.NONE, DataType.FLOAT_32, DataType.FLOAT_16, DataType.BFLOAT_16,
                                                DataType.TFLOAT_32)}
    assert offered == set(QUANTIZED)


def _step(model_type, build, part, data_type, **adapter):
    """One training step of a LoRA (or `adapter`'s variant) on `part` stored in `data_type`: ({LoRA
    name: its parameter}, the part's weights stored in 8 or 4 bits, the loss)."""
    torch.manual_seed(0)
    model = build()
    other_text = {p: {"train": False} for p in model.text_encoder_names if p != part}
    config = TrainConfig.model_validate({
        "model_type": model_type, "training_method": "LORA", "lora_rank": 2, "lora_alpha": 2.0, **adapter,
        model.denoiser: {"train": part == model.denoiser}, **other_text,
        part: {"train": True, "weight_dtype": data_type},
    })
    precision = Precision(DataType.FLOAT_32, CPU)
    configure_model(model, config, CPU, precision)
    frozen = [p for p in model.parts[part].parameters() if p.dtype in STORED]
    groups = get_method("LORA").setup(model, config, CPU)
    check_quantized_parts_frozen(model, config)
    trained = {id(p) for g in groups for p in g.params}
    lora = {name: p for name, p in model.parts[part].named_parameters() if id(p) in trained}
    for p in lora.values():  # lora_B starts at zero, which leaves lora_A without a gradient
        torch.nn.init.normal_(p, std=0.02)
    latents = model.encode_images(torch.zeros(2, 3, 64, 64), sample=False).detach()
    batch = Batch(size=(64, 64), captions=["a red circle", "a blue square"], loss_weights=torch.ones(2),
                  image_paths=["0.png", "1.png"], latents=latents, original_sizes=[(64, 64)] * 2, crop_top_lefts=[(0, 0)] * 2)
    loss = DiffusionStep(model, config, CPU, precision).loss(batch, frozenset({part} & set(model.text_encoder_names)))
    loss.backward()
    return lora, frozen, loss, model


@functools.cache
def _reached_in_float32(model_type, build, part) -> frozenset[str]:
    """The LoRA weights a step reaches with the part in FLOAT_32 (e.g. Z-Image reads Qwen3's
    second-to-last layer, so the last layer's LoRA gets no gradient in any type)."""
    lora, _, _, _ = _step(model_type, build, part, "FLOAT_32")
    return frozenset(name for name, p in lora.items() if p.grad is not None)


@pytest.mark.parametrize("data_type", [t.value for t in QUANTIZED])
@pytest.mark.parametrize("model_type, build, part, kind", PARTS, ids=[p[3] for p in PARTS])
def test_lora_on_a_quantized_part_gets_gradients_and_the_part_none(model_type, build, part, kind, data_type, monkeypatch):
    kernel = {"INT_W8A8": "_int_mm", "FLOAT_W8A8": "_scaled_mm"}.get(data_type)
    calls = []
    if kernel:  # the W8A8 types multiply in 8 bits (on the CPU too); the device's probe made before counting
        assert w8a8_kernel_problem(DataType(data_type), CPU) is None
        original = getattr(torch, kernel)
        monkeypatch.setattr(torch, kernel, lambda *a, **k: calls.append(1) or original(*a, **k))
    lora, frozen, loss, _ = _step(model_type, build, part, data_type)
    assert bool(calls) == bool(kernel), kind
    assert frozen, f"{kind}: no weight stored in {data_type}"
    assert lora and all(p.requires_grad and p.dtype == torch.float32 for p in lora.values())
    assert torch.isfinite(loss)
    reached = {name for name, p in lora.items() if p.grad is not None}
    assert reached == _reached_in_float32(model_type, build, part) and reached, kind
    assert all(torch.isfinite(lora[name].grad).all() for name in reached), kind
    assert any(lora[name].grad.abs().sum() > 0 for name in reached), kind
    assert all(p.grad is None and not p.requires_grad for p in frozen), kind


@pytest.mark.parametrize("data_type", [t.value for t in QUANTIZED])
def test_dora_on_a_quantized_part_reads_its_real_weights(data_type):
    """DoRA computes with the base weight itself (its norms, and the direction under the LoRA):
    on a quantized part it reads the weights the layer computes with, not the stored codes (raw,
    float8 codes fail to multiply on the CPU, int8 ones give norms ~100x too large, NF4's packed
    bytes have another shape)."""
    from ot_gradio.training.float_weight import float_weight

    def clip_dora(weight_dtype):
        torch.manual_seed(0)
        model = _sd15()
        config = TrainConfig.model_validate({
            "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "lora_rank": 2, "lora_decompose": True,
            "output_model_format": "KOHYA_LORA", "unet": {"train": False}, "text_encoder": {"train": True, "weight_dtype": weight_dtype}})
        configure_model(model, config, CPU, Precision(DataType.FLOAT_32, CPU))
        get_method("LORA").setup(model, config, CPU)
        layers = {n: m for n, m in model.text_encoder.named_modules() if hasattr(m, "lora_magnitude_vector") and m.lora_magnitude_vector}
        return model, config, layers

    _, _, plain = clip_dora("FLOAT_32")
    model, config, layers = clip_dora(data_type)
    assert layers.keys() == plain.keys() and layers
    for name, layer in layers.items():
        base = layer.get_base_layer()
        assert base.weight.dtype in STORED
        real = float_weight(base)
        assert real.shape == plain[name].get_base_layer().weight.shape
        x = torch.randn(24, base.in_features)
        with torch.no_grad():  # the layer's own forward computes with these weights (W8A8: its activations rounded too)
            theirs, ours = base(x), torch.nn.functional.linear(x, real, base.bias)
        assert (theirs - ours).norm() <= 0.05 * ours.norm(), name  # (float8 activations: 3 mantissa bits)
        magnitude, plain_magnitude = (m.lora_magnitude_vector["default"].weight.reshape(-1) for m in (layer, plain[name]))
        torch.testing.assert_close(magnitude, real.norm(dim=0))  # input axis (the default): each column's norm
        ratio = magnitude / plain_magnitude  # the same weights' norms up to their rounding (codes: ~100x, or no shape)
        assert ratio.min() > 0.67 and ratio.max() < 1.5, name
    latents = model.encode_images(torch.zeros(2, 3, 64, 64), sample=False).detach()
    batch = Batch(size=(64, 64), captions=["a red circle", "a blue square"], loss_weights=torch.ones(2),
                  image_paths=["0.png", "1.png"], latents=latents, original_sizes=[(64, 64)] * 2, crop_top_lefts=[(0, 0)] * 2)
    loss = DiffusionStep(model, config, CPU, Precision(DataType.FLOAT_32, CPU)).loss(batch, frozenset({"text_encoder"}))
    loss.backward()
    magnitudes = [m.lora_magnitude_vector["default"].weight for m in layers.values()]
    assert torch.isfinite(loss) and any(p.grad is not None and p.grad.abs().sum() > 0 for p in magnitudes)


@pytest.mark.parametrize("peft_type", ["LOHA", "LOKR"])
def test_loha_and_lokr_on_nf4_take_the_layers_real_shape(peft_type):
    """bitsandbytes keeps NFLOAT_4 weights packed (two 4-bit codes a byte, one column): LoHa's factors
    and both adapters' delta take the layer's (out, in), not that stored shape."""
    from ot_gradio.training.lora import lora_layers

    lora, frozen, loss, model = _step("STABLE_DIFFUSION_15", _sd15, "text_encoder", "NFLOAT_4", peft_type=peft_type)
    assert frozen and all(p.grad is None and not p.requires_grad for p in frozen)
    assert torch.isfinite(loss) and lora
    reached = [p.grad for p in lora.values() if p.grad is not None]
    assert reached and all(torch.isfinite(g).all() for g in reached) and any(g.abs().sum() > 0 for g in reached)
    layers = lora_layers(model.text_encoder)
    for name, layer in layers.items():
        base = layer.get_base_layer()
        assert type(base.weight).__name__ == "Params4bit" and base.weight.shape[1] == 1, name
        assert layer.get_delta_weight("default").shape == (base.out_features, base.in_features), name



def test_dora_lokr_on_nf4_decomposes_the_real_weights():
    """DoRA on LoKr (lokr_weight_decompose) over packed NF4 weights: the layer computes
    magnitude * (W + delta) / ||W + delta|| with W the dequantized weight (not the packed bytes),
    and the step reaches the magnitude."""
    from ot_gradio.training.float_weight import float_weight
    from ot_gradio.training.lokr_switches import lokr_factors
    from ot_gradio.training.lora import lora_layers
    from ot_gradio.training.lora_variants import adapter_parameters

    lora, _, loss, model = _step("STABLE_DIFFUSION_15", _sd15, "text_encoder", "NFLOAT_4", peft_type="LOKR",
                                 lokr_weight_decompose=True, output_model_format="KOHYA_LORA")
    assert torch.isfinite(loss) and lora
    for name, layer in lora_layers(model.text_encoder).items():
        base, magnitude = layer.get_base_layer(), adapter_parameters(layer)["lora_magnitude_vector"]
        x = torch.randn(3, base.in_features, generator=torch.Generator().manual_seed(0))
        assert type(base.weight).__name__ == "Params4bit" and base.weight.shape[1] == 1, name
        assert magnitude.grad is not None and magnitude.grad.abs().sum() > 0, name
        w1, w2 = lokr_factors(layer)
        merged = float_weight(base) + layer.scaling["default"] * torch.kron(w1, w2)
        weight = magnitude[:, None] * merged / (merged.norm(dim=1, keepdim=True) + torch.finfo(torch.float32).eps)
        with torch.no_grad():
            torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, weight, base.bias), rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("data_type", [DataType.NFLOAT_4, DataType.INT_8])
def test_bitsandbytes_layers_are_quantized_one_at_a_time(data_type, monkeypatch):
    """Each layer's weight is quantized on the run's device as its layer is made (bitsandbytes
    quantizes a weight when it is moved): left for the part's move, the float32 copies of every
    layer waited in RAM together, 48 GB more for Flux.1's transformer (a 2 GB bfloat16 two-block
    Flux took 4.5 GB more at its peak, 0.8 GB after)."""
    from ot_gradio.training import quantize

    made, pending = [], []
    real = quantize._bnb_linear

    def recording(layer, *args, **kwargs):
        new = real(layer, *args, **kwargs)
        made.append(new)
        pending.append(sum(1 for m in made if not (getattr(m.weight, "bnb_quantized", False) or m.weight.dtype == torch.int8)))
        return new

    monkeypatch.setattr(quantize, "_bnb_linear", recording)
    model = _flux()
    count = quantize.quantize_linear_layers(model.transformer, data_type, CPU, torch.float32, "transformer")
    assert count == len(made) > 10
    assert pending == [0] * count  # no layer waits unquantized while the next one is made
    x = torch.randn(3, made[0].in_features)
    assert torch.isfinite(made[0](x)).all()
