"""weight_dtype GGUF: the transformer from a .gguf file (transformer.model_name), its Linear
weights kept in their Q8_0 blocks as diffusers' GGUF layers and dequantized per forward, read by
diffusers' single-file loader (Z-Image and most families) or by the family's own key converter
(Flux.1, Chroma); a family that reads no .gguf file says so before loading."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from safetensors.torch import load_file

from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.registry import get_family
from ot_gradio.models.sana import Sana
from tests.models.gguf_files import Q8_BLOCK, q8_quantizable, write_gguf


@pytest.fixture(scope="module", params=[("Z_IMAGE", "z-image"), ("FLUX_DEV_1", "flux")], ids=["diffusers-loader", "own-converter"])
def gguf_file(request, tiny_dir, tmp_path_factory):
    """A tiny transformer as a .gguf file in its original layout, the family and the weights of
    the same file unquantized (as the .safetensors it was written from loads)."""
    model_type, tiny = request.param
    family, folder = get_family(model_type), tmp_path_factory.mktemp("gguf")
    original = family.load(f"tiny:{tiny}", offline=True).save_single_file(folder / "t.safetensors", None)
    weights = load_file(str(original))
    assert sum(q8_quantizable(k, v) for k, v in weights.items()) > 10
    loaded = family.load(f"tiny:{tiny}", offline=True, part_models={"transformer": str(original)}).transformer.state_dict()
    return family, tiny, write_gguf(weights, folder / "t.gguf", tiny), loaded


def test_the_gguf_transformer_keeps_q8_0_blocks_within_their_rounding(gguf_file):
    from diffusers.quantizers.gguf.utils import GGUFLinear, GGUFParameter, dequantize_gguf_tensor

    family, tiny, path, weights = gguf_file
    model = family.load(f"tiny:{tiny}", offline=True, part_models={"transformer": str(path)})
    layers = {name: m for name, m in model.transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    quantized = {name: m for name, m in layers.items() if isinstance(m.weight, GGUFParameter) and m.weight.dtype == torch.uint8}
    assert len(quantized) > 10 and all(isinstance(m, GGUFLinear) for m in quantized.values())
    for name, layer in quantized.items():
        original = weights[f"{name}.weight"]
        got = dequantize_gguf_tensor(layer.weight).float()
        assert got.shape == original.shape and not torch.equal(got, original)
        # Q8_0: each block of 32 is int8 times one float16 scale (block max / 127): off by half a
        # step, plus float16 roundings of the scale and of the product (up to 127 x 2^-11 of a step each)
        blocks = original.reshape(-1, Q8_BLOCK)
        step = blocks.abs().amax(dim=1, keepdim=True) / 127
        assert ((got.reshape(-1, Q8_BLOCK) - blocks).abs() <= step * (0.5 + 2 * 127 / 2048) + 1e-8).all(), name
    # the rest (norms, biases, pad tokens) as the file stores them, in float32
    plain = {k: v for k, v in model.transformer.state_dict().items() if not isinstance(v, GGUFParameter)}
    assert plain and all(v.dtype == torch.float32 and torch.equal(v, weights[k]) for k, v in plain.items())


@pytest.mark.parametrize(("model_type", "tiny"), [("QWEN", "qwen-image"), ("FLUX_2", "flux2-dev"), ("KREA_2", "krea2"),
                                                 ("ERNIE", "ernie"), ("ANIMA", "anima"), ("CHROMA_1", "chroma"), ("WAN_2_1", "wan"),
                                                 ("QWEN_IMAGE_EDIT", "qwen-image-edit"),
                                                 ("HUNYUAN_VIDEO", "hunyuan_video")])
def test_the_other_gguf_families_load_their_transformer_file_as_gguf(tiny_dir, tmp_path, model_type, tiny):
    """Each family described `gguf` (Z-Image and Flux.1 above): its transformer file, written as GGUF, loads
    with diffusers' GGUF layers, the Q8_0 weights kept as bytes."""
    from diffusers.quantizers.gguf.utils import GGUFLinear, GGUFParameter

    from ot_gradio.config.gguf import GGUF_MODEL_TYPES

    family = get_family(model_type)
    assert family.gguf_transformer and model_type in GGUF_MODEL_TYPES
    weights = load_file(str(family.load(f"tiny:{tiny}", offline=True).save_single_file(tmp_path / "t.safetensors", None)))
    quantizable = sum(q8_quantizable(k, v) for k, v in weights.items())
    model = family.load(f"tiny:{tiny}", offline=True, part_models={"transformer": str(write_gguf(weights, tmp_path / "t.gguf", tiny))})
    kept = [m for m in model.transformer.modules() if isinstance(m, GGUFLinear) and isinstance(m.weight, GGUFParameter)
            and m.weight.dtype == torch.uint8]
    # not one count: a fused weight of the file splits into several layers, and Anima's file also
    # holds its LLM adapter, which comes from the config folder
    assert quantizable and kept


def test_a_family_without_gguf_loading_refuses_the_file_before_loading(tmp_path):
    (tmp_path / "t.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match=r"^transformer\.model_name: Sana does not read \.gguf transformer files"):
        Sana.load("tiny:never-built", offline=True, part_models={"transformer": str(tmp_path / "t.gguf")})


def test_hunyuan_videos_fused_gguf_weights_split_into_whole_quantized_rows(tmp_path):
    """HunyuanVideo's fused weights (q/k/v, the single blocks' linear1 with the MLP input) as Q8_0
    bytes split per layer (the tiny transformer's 24 wide rows are too short to quantize): each
    layer keeps its own rows, still Q8_0, dequantized within the rounding."""
    from diffusers.quantizers.gguf.utils import GGUFParameter, dequantize_gguf_tensor

    from ot_gradio.models.hunyuan_video_keys import diffusers_state_dict
    from ot_gradio.models.transformer_file import read_transformer_file

    hidden, mlp = 32, 64
    torch.manual_seed(0)
    original = {"single_blocks.0.linear1.weight": torch.randn(3 * hidden + mlp, hidden),
                "double_blocks.0.img_attn_qkv.weight": torch.randn(3 * hidden, hidden)}
    weights = diffusers_state_dict(read_transformer_file(write_gguf(original, tmp_path / "t.gguf", "hunyuan_video")), hidden)
    rows = {"single_transformer_blocks.0.attn.to_q.weight": original["single_blocks.0.linear1.weight"][:hidden],
            "single_transformer_blocks.0.attn.to_v.weight": original["single_blocks.0.linear1.weight"][2 * hidden: 3 * hidden],
            "single_transformer_blocks.0.proj_mlp.weight": original["single_blocks.0.linear1.weight"][3 * hidden:],
            "transformer_blocks.0.attn.to_k.weight": original["double_blocks.0.img_attn_qkv.weight"][hidden: 2 * hidden]}
    assert len(weights) == 7 and rows.keys() <= weights.keys()
    for key, expected in rows.items():
        got = weights[key]
        assert isinstance(got, GGUFParameter) and got.dtype == torch.uint8, key
        step = expected.abs().amax(dim=1, keepdim=True) / 127  # one block per row: the rows' own scales
        assert ((dequantize_gguf_tensor(got).float() - expected).abs() <= step * (0.5 + 2 * 127 / 2048) + 1e-8).all(), key


@pytest.mark.parametrize(("data_type", "kernel"), [("GGUF_A8_INT", "_int_mm"), ("GGUF_A8_FLOAT", "_scaled_mm")])
def test_gguf_a8_runs_the_quantized_layers_matmuls_in_8_bits(gguf_file, data_type, kernel, monkeypatch):
    """GGUF_A8_INT / GGUF_A8_FLOAT (OneTrainer's): the run's configure step turns the .gguf file's
    quantized GGUF layers into ones that requantize the weight per row and multiply in 8 bits
    (the kernel called, forward and backward); their outputs and input gradients are GGUF's up
    to 8-bit rounding; the file's F32 layers stay as they were."""
    from diffusers.quantizers.gguf.utils import UNQUANTIZED_TYPES, GGUFLinear

    from ot_gradio.config.enums import DataType
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import configure_model

    family, tiny, path, _ = gguf_file
    model = family.load(f"tiny:{tiny}", offline=True, part_models={"transformer": str(path)})
    gguf = {n: m for n, m in model.transformer.named_modules() if type(m) is GGUFLinear}
    quantized = {n for n, m in gguf.items() if m.weight.quant_type not in UNQUANTIZED_TYPES}
    torch.manual_seed(0)
    inputs = {n: torch.randn(24, gguf[n].in_features, requires_grad=True) for n in quantized}
    expected = {}
    for name in quantized:
        y = gguf[name](inputs[name])
        (grad,) = torch.autograd.grad(y.square().sum(), inputs[name])
        expected[name] = (y.detach(), grad)
    config = TrainConfig.model_validate({"model_type": family.model_type.value, "training_method": "LORA",
                                         "transformer": {"weight_dtype": data_type, "model_name": str(path)}})
    assert configure_model(model, config, torch.device("cpu"), Precision(DataType.FLOAT_32, torch.device("cpu"))) == []
    assert {type(m).__name__ for n, m in gguf.items() if n in quantized} == {"GGUFLinearA8"}
    assert all(type(m) is GGUFLinear for n, m in gguf.items() if n not in quantized)
    calls = []
    original = getattr(torch, kernel)
    monkeypatch.setattr(torch, kernel, lambda *a, **k: calls.append(1) or original(*a, **k))
    for name in quantized:
        y = gguf[name](inputs[name])
        (grad,) = torch.autograd.grad(y.square().sum(), inputs[name])
        y_gguf, grad_gguf = expected[name]
        # 8-bit activations and requantized weights (measured: int8 0.9 % / 1.2 %, float8 with its 3
        # mantissa bits 3.9 % / 5.0 % of the norm): twice that
        bound_y, bound_grad = {"GGUF_A8_INT": (0.02, 0.025), "GGUF_A8_FLOAT": (0.08, 0.1)}[data_type]
        assert (y.detach() - y_gguf).norm() <= bound_y * y_gguf.norm(), name
        assert (grad - grad_gguf).norm() <= bound_grad * grad_gguf.norm(), name
    assert len(calls) == 2 * len(quantized)  # one 8-bit matmul forward, one backward, each layer


ADAPTERS = {"DoRA": {"lora_decompose": True}, "LoHa": {"peft_type": "LOHA"}, "LoKr": {"peft_type": "LOKR"}}


def _adapter_step(family, tiny, transformer, adapter, weight_dtype):
    """`adapter` on the transformer loaded from `transformer` (a .gguf or .safetensors file) through the
    run's path (configure_model, the LORA method's setup), one loss and its backward: (model, config,
    {adapter parameter name: parameter}, loss)."""
    from ot_gradio.config.enums import DataType
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.data.batches import Batch
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import DiffusionStep, configure_model
    from ot_gradio.training.methods import get_method

    cpu, precision = torch.device("cpu"), Precision(DataType.FLOAT_32, torch.device("cpu"))
    torch.manual_seed(0)
    model = family.load(f"tiny:{tiny}", offline=True, part_models={"transformer": str(transformer)})
    config = TrainConfig.model_validate({
        "model_type": family.model_type.value, "training_method": "LORA", "lora_rank": 2, "lora_alpha": 2.0,
        "output_model_format": "KOHYA_LORA", **adapter, **{p: {"train": False} for p in model.text_encoder_names},
        "transformer": {"train": True, "weight_dtype": weight_dtype, "model_name": str(transformer)}})
    configure_model(model, config, cpu, precision)
    trained = {id(p) for g in get_method("LORA").setup(model, config, cpu) for p in g.params}
    params = {n: p for n, p in model.transformer.named_parameters() if id(p) in trained}
    with torch.no_grad():  # one factor of each starts at zero, which leaves the others without a gradient
        for name, p in params.items():
            if not name.endswith("lora_magnitude_vector.default.weight"):
                p.add_(torch.randn_like(p) * 0.02)
    latents = model.encode_images(torch.zeros(2, 3, 64, 64), sample=False).detach()
    batch = Batch(size=(64, 64), captions=["a red circle", "a blue square"], loss_weights=torch.ones(2), image_paths=["0.png", "1.png"],
                  latents=latents, original_sizes=[(64, 64)] * 2, crop_top_lefts=[(0, 0)] * 2)
    loss = DiffusionStep(model, config, cpu, precision).loss(batch, frozenset())
    loss.backward()
    return model, config, params, loss


def _saved(model, config, path):
    from ot_gradio.training.methods import get_method

    return load_file(str(get_method("LORA").save(model, config, path, {})))


@pytest.mark.parametrize("weight_dtype", ["GGUF", "GGUF_A8_INT"])
@pytest.mark.parametrize("adapter", ADAPTERS.values(), ids=ADAPTERS.keys())
def test_dora_loha_and_lokr_train_on_the_gguf_transformer(gguf_file, adapter, weight_dtype, tmp_path, monkeypatch):
    """They compute with the layer's weights (DoRA's norms, LoHa's / LoKr's delta in the weight's
    shape): on GGUF layers, the real weights and shape (dequantized), not the stored blocks of
    bytes. The adapter trains, the GGUF weights get no gradient and stay bytes, no dequantized
    weight outlives the step, and the saved file is the one the same adapter on the .safetensors
    transformer writes."""
    from diffusers.quantizers.gguf.utils import GGUFParameter

    from ot_gradio.training import lora_variants
    from ot_gradio.training.float_weight import float_weight
    from ot_gradio.training.lora import lora_layers

    family, tiny, path, _ = gguf_file
    dequantized = []

    def recorded(layer):  # the copies made from quantized weights (a plain one is the layer's own tensor)
        weight = float_weight(layer)
        if weight.data_ptr() != layer.weight.data_ptr():
            dequantized.append(weakref.ref(weight))
        return weight

    monkeypatch.setattr(lora_variants, "float_weight", recorded)
    model, config, params, loss = _adapter_step(family, tiny, path, adapter, weight_dtype)
    gc.collect()
    assert bool(dequantized) == ("lora_decompose" in adapter) and all(w() is None for w in dequantized)
    assert torch.isfinite(loss) and params
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params.values())
    assert sum(p.grad.abs().sum() for p in params.values()) > 0
    blocks = [p for p in model.transformer.parameters() if isinstance(p, GGUFParameter) and p.dtype == torch.uint8]
    assert len(blocks) > 10 and all(p.grad is None and not p.requires_grad for p in blocks)
    layers = lora_layers(model.transformer)
    under = {name: layer.get_base_layer() for name, layer in layers.items()}
    assert any(isinstance(base.weight, GGUFParameter) and base.weight.dtype == torch.uint8 for base in under.values())
    if "lora_decompose" in adapter:
        for name, layer in layers.items():  # the input axis (the default): each column's norm
            magnitude = layer.lora_magnitude_vector["default"].weight.detach().reshape(-1)
            torch.testing.assert_close(magnitude, float_weight(under[name]).norm(dim=0))
    else:
        for name, layer in layers.items():
            assert layer.get_delta_weight("default").shape == (under[name].out_features, under[name].in_features), name
    gguf = _saved(model, config, tmp_path / "gguf.safetensors")
    plain = _saved(*_adapter_step(family, tiny, path.with_suffix(".safetensors"), adapter, "FLOAT_32")[:2], tmp_path / "plain.safetensors")
    assert {k: v.shape for k, v in gguf.items()} == {k: v.shape for k, v in plain.items()}


def test_a_loha_trained_on_the_gguf_transformer_merges_into_the_safetensors_one(gguf_file, tmp_path):
    """`convert merge`'s merge of the saved LoHa into the .safetensors transformer: its layers change
    by the delta the GGUF layers trained with, every other weight stays as it was."""
    from ot_gradio.tools.convert import merge_into
    from ot_gradio.training.lora import lora_layers
    from ot_gradio.training.lora_format import load_lora_file

    family, tiny, path, _ = gguf_file
    model, config, _, _ = _adapter_step(family, tiny, path, ADAPTERS["LoHa"], "GGUF")
    assert _saved(model, config, tmp_path / "loha.safetensors")
    base = family.load(f"tiny:{tiny}", offline=True, part_models={"transformer": str(path.with_suffix(".safetensors"))})
    before = {k: v.clone() for k, v in base.transformer.state_dict().items()}
    lora = load_lora_file(str(tmp_path / "loha.safetensors"), base.lora_module_names(), base.denoiser)
    layers = lora_layers(model.transformer)
    assert merge_into(base, lora.parts, lora.rank, lora.alpha, 1.0) == (len(layers), len(layers))
    after = base.transformer.state_dict()
    assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {f"{name}.weight" for name in layers}
    with torch.no_grad():
        for name, layer in layers.items():
            torch.testing.assert_close(after[f"{name}.weight"] - before[f"{name}.weight"], layer.get_delta_weight("default"),
                                       atol=1e-6, rtol=1e-4)
