"""OneTrainer's LoKr switches (training/lokr_switches.py) on a tiny Linear (32 -> 48: factors 6x4 and
8x8) and Conv2d (8 -> 16, 3x3: factors 4x2 and 4x4): DoRA on LoKr on either axis, a whole w2,
and the vec trick. The trainer's end-to-end run is in tests/e2e/test_lora_variant_runs.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F

from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.lokr_switches import lokr_factors
from ot_gradio.training.lora import add_lora, load_lora_state_dict, lora_layers, lora_state_dict
from ot_gradio.training.lora_format import load_lora_file, save_lora
from ot_gradio.training.lora_layer_entries import check_output_format, check_start_file
from ot_gradio.training.lora_variants import AdapterSpec, adapter_parameters
from tests.lora_reference import _reference_weight

EPS = torch.finfo(torch.float32).eps
G = torch.Generator().manual_seed(5)
X, XC = torch.randn(2, 3, 32, generator=G), torch.randn(2, 8, 5, 5, generator=G)


def _model():
    torch.manual_seed(0)
    m = nn.Module()
    m.lin, m.conv = nn.Linear(32, 48), nn.Conv2d(8, 16, 3, padding=1)
    return m


def _lokr(rank=2, alpha=1.0, randomize=True, **switches):
    m = _model()
    base = {k: v.detach().clone() for k, v in m.state_dict().items()}
    add_lora(m, kind="unet", rank=rank, alpha=alpha, dropout=0.0, layer_preset="full", spec=AdapterSpec(peft_type="LOKR", **switches))
    if randomize:  # factors (w1 starts at zero) and magnitudes away from their start
        with torch.no_grad():
            for name, p in _params(m).items():
                p.mul_(1.3) if "lokr_" not in name else p.add_(0.3 * torch.randn(p.shape, generator=G))
    return m, base


def _params(m):
    """The live adapter parameters (lora_state_dict gives the peft form: a copy where it differs)."""
    return {f"{n}.{k}": p for n, layer in lora_layers(m).items() for k, p in adapter_parameters(layer).items()}


def _kron(layer):
    w1, w2 = lokr_factors(layer)
    return torch.kron(w1[:, :, None, None] if w2.dim() == 4 else w1, w2)


def _axis_norm(w, output):
    if output:
        return w.reshape(w.shape[0], -1).norm(dim=1).reshape(-1, *[1] * (w.dim() - 1))
    return w.transpose(0, 1).reshape(w.shape[1], -1).norm(dim=1).reshape(1, -1, *[1] * (w.dim() - 2))


@pytest.mark.parametrize("output", [True, False], ids=["output-axis", "input-axis"])
def test_dora_lokr_forward_is_the_formula_with_a_constant_norm(output):
    m, base = _lokr(lokr_decompose=True, lokr_dora_output=output)
    state = lora_state_dict(m)
    magnitude = adapter_parameters(lora_layers(m)["lin"])["lora_magnitude_vector" if output else "dora_scale"]
    for name, x, op in (("lin", X, F.linear), ("conv", XC, lambda x, w, b: F.conv2d(x, w, b, padding=1))):
        layer = lora_layers(m)[name]
        # lin: alpha / rank = 1 / 2; conv's factors (4x2, 4x4) are both whole at rank 2: scale 1
        merged = base[f"{name}.weight"] + {"lin": 0.5, "conv": 1.0}[name] * _kron(layer)
        mag = state[f"{name}.lora_magnitude_vector" if output else f"{name}.dora_scale"]
        mag = mag.reshape(-1, *[1] * (merged.dim() - 1)) if output else mag
        expected = op(x, mag * merged / (_axis_norm(merged, output).detach() + EPS), base[f"{name}.bias"])
        torch.testing.assert_close(getattr(m, name)(x), expected, rtol=1e-5, atol=1e-6)
    # backprop through the layer is the formula's with the norm held constant
    w1 = next(iter(lora_layers(m)["lin"].lokr_w1.values()))
    m.lin(X).square().sum().backward()
    w1_ref, mag_ref = w1.detach().clone().requires_grad_(), magnitude.detach().clone().requires_grad_()
    layer = lora_layers(m)["lin"]
    merged = base["lin.weight"] + 0.5 * torch.kron(w1_ref, lokr_factors(layer)[1].detach())
    view = mag_ref.reshape(-1, 1) if output else mag_ref
    F.linear(X, view * merged / (_axis_norm(merged, output).detach() + EPS), base["lin.bias"]).square().sum().backward()
    torch.testing.assert_close(w1.grad, w1_ref.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(magnitude.grad, mag_ref.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("output", [True, False], ids=["output-axis", "input-axis"])
def test_magnitude_starts_at_the_base_norms_and_one_step_moves_it(output):
    m, base = _lokr(randomize=False, lokr_decompose=True, lokr_dora_output=output)
    state = lora_state_dict(m)
    expected = {  # peft's magnitude shape on the output axis, LyCORIS's dora_scale on the input axis
        "lin": base["lin.weight"].norm(dim=1) if output else base["lin.weight"].norm(dim=0)[None],
        "conv": base["conv.weight"].flatten(1).norm(dim=1)[None, :, None, None] if output
        else base["conv.weight"].transpose(0, 1).flatten(1).norm(dim=1)[None, :, None, None],
    }
    key = "lora_magnitude_vector" if output else "dora_scale"
    for name, norms in expected.items():
        torch.testing.assert_close(state[f"{name}.{key}"], norms)
    plain = _model()
    torch.testing.assert_close(m.lin(X), plain.lin(X), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m.conv(XC), plain.conv(XC), rtol=1e-5, atol=1e-5)

    params = [p for p in m.parameters() if p.requires_grad]
    before = {k: v.clone() for k, v in state.items()}
    opt = torch.optim.Adam(params, lr=1e-2)
    (m.lin(X).sin().sum() + m.conv(XC).sin().sum()).backward()
    opt.step()
    after = lora_state_dict(m)
    for name in ("lin", "conv"):
        assert not torch.equal(after[f"{name}.{key}"], before[f"{name}.{key}"]), f"{name}'s magnitude did not move"
        assert after[f"{name}.lokr_w1"].abs().max() > 0, f"{name}'s w1 did not move"


@pytest.mark.parametrize("output", [True, False], ids=["output-axis", "input-axis"])
def test_dora_lokr_file_has_dora_scale_and_reloads_equal(output, tmp_path):
    m, base = _lokr(lokr_decompose=True, lokr_dora_output=output)
    path = save_lora(tmp_path / "k.safetensors", unet=m, lora_format="kohya")
    tensors = load_file(str(path))
    shapes = {"lin": (48, 1), "conv": (16, 1, 1, 1)} if output else {"lin": (1, 32), "conv": (1, 8, 1, 1)}
    assert {n: tuple(tensors[f"lora_unet_{n}.dora_scale"].shape) for n in shapes} == shapes
    # LyCORIS's formula (ComfyUI's on the input axis) rebuilds the trained weight from the file
    for name, x in (("lin", X), ("conv", XC)):
        entries = {k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"lora_unet_{name}.")}
        weight = _reference_weight(base[f"{name}.weight"], entries)
        op = F.linear if name == "lin" else lambda x, w, b: F.conv2d(x, w, b, padding=1)
        torch.testing.assert_close(op(x, weight, base[f"{name}.bias"]), getattr(m, name)(x), rtol=1e-5, atol=1e-5)

    loaded = load_lora_file(path)
    spec = AdapterSpec(peft_type="LOKR", lokr_decompose=True, lokr_dora_output=output)
    # the file's layout: conv's w2 is whole (rank 4 on its 4 x 4 factor), so it is built whole
    assert check_start_file(spec, loaded.parts, path) == replace(spec, lokr_whole_w2=frozenset({"unet:conv"}))
    fresh, _ = _lokr(randomize=False, lokr_decompose=True, lokr_dora_output=output)
    load_lora_state_dict(fresh, loaded.parts["unet"], kind="unet")
    torch.testing.assert_close(fresh.lin(X), m.lin(X))
    torch.testing.assert_close(fresh.conv(XC), m.conv(XC))
    with pytest.raises(ValueError, match="lokr_dora_on_output"):
        check_start_file(AdapterSpec(peft_type="LOKR", lokr_decompose=True, lokr_dora_output=not output), loaded.parts, path)
    with pytest.raises(ValueError, match="turn lokr_weight_decompose on"):
        check_start_file(AdapterSpec(peft_type="LOKR"), loaded.parts, path)
    with pytest.raises(ValueError, match="no diffusers/PEFT form"):
        save_lora(tmp_path / "d.safetensors", unet=m, lora_format="diffusers")


def test_full_matrix_trains_two_whole_factors_at_scale_one_as_onetrainer(tmp_path):
    low, _ = _lokr(rank=1, randomize=False)
    assert "lin.lokr_w2_a" in lora_state_dict(low) and "lin.lokr_w2" not in lora_state_dict(low)
    m, base = _lokr(rank=1, alpha=4.0, randomize=False, lokr_full_matrix=True)
    params = _params(m)
    assert {k: tuple(v.shape) for k, v in params.items()} == {
        "lin.lokr_w1": (6, 4), "lin.lokr_w2": (8, 8), "conv.lokr_w1": (4, 2), "conv.lokr_w2": (4, 4, 3, 3)}
    # starts as no change, as OneTrainer starts it: w1 Kaiming, w2 zero
    assert params["lin.lokr_w1"].abs().max() > 0 and params["lin.lokr_w2"].abs().max() == 0
    with torch.no_grad():
        params["lin.lokr_w2"].normal_(generator=G)
    w1, w2 = params["lin.lokr_w1"].detach().clone(), params["lin.lokr_w2"].detach()
    # scale 1 whatever alpha / rank: OneTrainer sets such a layer's alpha to its rank, and readers apply it so
    trained = base["lin.weight"] + torch.kron(w1, w2)
    torch.testing.assert_close(m.lin(X), F.linear(X, trained, base["lin.bias"]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lora_state_dict(m)["lin.lokr_w1"], w1 / 4.0)  # the peft form: every layer at alpha / rank
    path = save_lora(tmp_path / "f.safetensors", unet=m, lora_format="kohya")
    tensors = load_file(str(path))
    entries = {k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith("lora_unet_lin.")}
    assert set(entries) == {"lokr_w1", "lokr_w2", "alpha"}
    torch.testing.assert_close(entries["lokr_w1"], w1)  # the trained factor, as readers apply it
    torch.testing.assert_close(_reference_weight(base["lin.weight"], entries), trained)
    fresh, _ = _lokr(rank=1, alpha=4.0, randomize=False, lokr_full_matrix=True)
    load_lora_state_dict(fresh, load_lora_file(path).parts["unet"], kind="unet")  # a continued run
    torch.testing.assert_close(_params(fresh)["lin.lokr_w1"], w1)
    torch.testing.assert_close(fresh.lin(X), m.lin(X))


def test_vec_trick_equals_the_kron_product_without_building_it(monkeypatch):
    m, base = _lokr(lokr_vec_trick=True)
    layer = lora_layers(m)["lin"]
    assert "forward" in vars(layer) and "forward" not in vars(lora_layers(m)["conv"])  # Linear layers only
    kron = F.linear(X, base["lin.weight"] + 0.5 * _kron(layer), base["lin.bias"])
    peft = type(layer).forward(layer, X)  # peft's own path, through the full delta
    torch.testing.assert_close(peft, kron, rtol=1e-5, atol=1e-6)

    def no_kron(*_a, **_k):
        raise AssertionError("the vec trick built kron(w1, w2)")

    monkeypatch.setattr(torch, "kron", no_kron)
    vec = m.lin(X)
    torch.testing.assert_close(vec, kron, rtol=1e-5, atol=1e-6)
    with pytest.raises(AssertionError, match="vec trick"):
        type(layer).forward(layer, X)  # the patch is what peft's path calls
    monkeypatch.undo()
    w1 = next(iter(layer.lokr_w1.values()))
    vec.square().sum().backward()
    grad = w1.grad.clone()
    w1.grad = None
    kron.square().sum().backward()
    torch.testing.assert_close(grad, w1.grad, rtol=1e-4, atol=1e-5)


def _spec(**options):
    return AdapterSpec.from_config(TrainConfig(**options))


def test_the_config_switches_reach_lokr_layers_only():
    spec = _spec(peft_type="LOKR", lokr_weight_decompose=True, lokr_dora_on_output=False, lokr_full_matrix=True)
    assert (spec.lokr_decompose, spec.lokr_dora_output, spec.lokr_full_matrix, spec.lokr_vec_trick) == (True, False, True, True)
    plain = _spec(peft_type="LORA", lokr_weight_decompose=True, lokr_full_matrix=True)
    assert not (plain.lokr_decompose or plain.lokr_full_matrix or plain.lokr_vec_trick)
    with pytest.raises(ValueError, match="^lora_decompose: "):
        _spec(peft_type="LOKR", lora_decompose=True)
    with pytest.raises(ValueError, match="^output_model_format: .*lokr_weight_decompose"):
        check_output_format(spec, diffusers_keys=True)
    check_output_format(spec, diffusers_keys=False)
    # DoRA takes the full weight, so with it the vec trick is not installed
    m, _ = _lokr(lokr_decompose=True, lokr_vec_trick=True)
    assert vars(lora_layers(m)["lin"])["forward"].__func__.__name__ == "_decomposed_forward"


def test_the_doctor_names_what_loaders_do_with_lokr_dora():
    from ot_gradio.config.doctor import check, errors

    def config(**options):
        return TrainConfig(training_method="LORA", peft_type="LOKR", lokr_weight_decompose=True, **options)

    assert any(e.startswith("output_model_format: DIFFUSERS_LORA") for e in errors(config(output_model_format="DIFFUSERS_LORA")))
    assert not any(e.startswith("output_model_format") for e in errors(config(output_model_format="KOHYA_LORA")))
    said = [w for w in check(config(output_model_format="KOHYA_LORA")) if w.startswith("lokr_dora_on_output")]
    assert len(said) == 1 and all(name in said[0] for name in ("A1111", "Forge", "ComfyUI"))
    assert not [w for w in check(config(output_model_format="KOHYA_LORA", lokr_dora_on_output=False)) if "lokr_" in w]
    # Tucker on an SD UNet's conv layers: ComfyUI and Forge skip them; not said without conv layers
    tucker = [w for w in check(config(output_model_format="KOHYA_LORA", lokr_dora_on_output=False, lokr_use_tucker=True))
              if w.startswith("lokr_use_tucker")]
    assert len(tucker) == 1 and "ComfyUI and Forge fail" in tucker[0]
    assert not [w for w in check(config(output_model_format="KOHYA_LORA", lokr_dora_on_output=False, lokr_use_tucker=True,
                                        layer_filter_preset="attn-mlp")) if w.startswith("lokr_use_tucker")]


def test_whole_w2_layers_are_kept_per_part():
    """SDXL's two CLIPs have the same layer paths: at dim 16 CLIP-L's q_proj (768 = 24 x 32) holds w2
    whole and CLIP-G's (1280 = 32 x 40) a product. Keyed by path alone, one part's layers replaced
    the other's, and a part's product was built whole (or its whole w2 as a product)."""
    from ot_gradio.training.lora_layer_entries import part_spec

    q = "text_model.encoder.layers.0.self_attn.q_proj"
    whole = {f"{q}.lokr_w1": torch.zeros(24, 24), f"{q}.lokr_w2": torch.zeros(32, 32)}
    product = {f"{q}.lokr_w1": torch.zeros(32, 32), f"{q}.lokr_w2_a": torch.zeros(40, 16), f"{q}.lokr_w2_b": torch.zeros(16, 40)}
    for parts in ({"text_encoder": whole, "text_encoder_2": product}, {"text_encoder_2": product, "text_encoder": whole}):
        spec = check_start_file(AdapterSpec(peft_type="LOKR"), parts, "sdxl.safetensors")
        assert not spec.lokr_full_matrix
        assert part_spec(spec, "text_encoder").lokr_whole_w2 == {"encoder_layers_0_self_attn_q_proj"}
        assert part_spec(spec, "text_encoder_2").lokr_whole_w2 == frozenset()
