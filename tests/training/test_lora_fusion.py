"""LoRA layers on q, k and v written as one layer on the fused qkv weight (training/lora_fusion.py):
the fused layer's delta is exactly the three deltas stacked, and reading splits it back, our
block-diagonal layers to their own rank and OneTrainer's fused-trained ones at theirs."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.training.lora_fusion import fuse_layers, split_layer, swap_halves


def _members(rank: int = 2, width: int = 8, dora: bool = False, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(3):
        layer = {"lora_A.weight": torch.randn(rank, width, generator=gen), "lora_B.weight": torch.randn(width, rank, generator=gen)}
        if dora:
            layer["lora_magnitude_vector"] = torch.rand(width, generator=gen) + 0.5
        out.append(layer)
    return out


def _delta(layer, alpha: float) -> torch.Tensor:
    a, b = layer["lora_A.weight"], layer["lora_B.weight"]
    return b @ a * (alpha / a.shape[0])


@pytest.mark.parametrize("dora", [False, True], ids=["lora", "dora-output-axis"])
def test_the_fused_layer_is_the_three_deltas_stacked_and_splits_back_to_them(dora):
    members = _members(dora=dora)
    fused = fuse_layers("qkv", members)
    assert fused["lora_A.weight"].shape == (6, 8) and fused["lora_B.weight"].shape == (24, 6)
    torch.testing.assert_close(_delta(fused, 3 * 0.5), torch.cat([_delta(m, 0.5) for m in members]), rtol=0, atol=1e-6)
    if dora:
        assert torch.equal(fused["lora_magnitude_vector"], torch.cat([m["lora_magnitude_vector"] for m in members]))
    back = split_layer("qkv", fused, 3 * 0.5, 3)
    for (layer, alpha), member in zip(back, members, strict=True):
        assert alpha == 0.5 and layer.keys() == member.keys()
        assert all(torch.equal(layer[k], member[k]) for k in member)


def test_a_layer_trained_fused_splits_into_its_row_blocks_at_its_rank():
    """OneTrainer trains one adapter on the fused weight: each member gets its rows of the up and the whole down."""
    gen = torch.Generator().manual_seed(1)
    fused = {"lora_A.weight": torch.randn(4, 8, generator=gen), "lora_B.weight": torch.randn(24, 4, generator=gen)}
    back = split_layer("qkv", fused, 2.0, 3)
    assert [(layer["lora_A.weight"].shape[0], alpha) for layer, alpha in back] == [(4, 2.0)] * 3
    torch.testing.assert_close(torch.cat([_delta(layer, alpha) for layer, alpha in back]), _delta(fused, 2.0), rtol=0, atol=0)


@pytest.mark.parametrize("trained_fused", [False, True], ids=["ours", "trained-fused"])
def test_members_of_unequal_widths_split_back_by_the_models_widths(trained_fused):
    """HunyuanVideo's single-block linear1 is q, k, v (8 rows each) and the MLP input (16): fused
    and split by those widths, exactly, whether block-diagonal (ours) or one adapter (OneTrainer's)."""
    gen = torch.Generator().manual_seed(2)
    widths = (8, 8, 8, 16)
    members = [{"lora_A.weight": torch.randn(2, 8, generator=gen), "lora_B.weight": torch.randn(w, 2, generator=gen)} for w in widths]
    fused = fuse_layers("linear1", members)
    if trained_fused:
        fused = {"lora_A.weight": torch.randn(8, 8, generator=gen), "lora_B.weight": torch.randn(40, 8, generator=gen)}
    assert fused["lora_B.weight"].shape == (40, 8)
    back = split_layer("linear1", fused, 4 * 0.5, 4, widths)
    torch.testing.assert_close(torch.cat([_delta(layer, alpha) for layer, alpha in back]), _delta(fused, 4 * 0.5), rtol=0, atol=1e-6)
    assert [layer["lora_B.weight"].shape[0] for layer, _ in back] == list(widths)
    if not trained_fused:
        assert all(alpha == 0.5 and all(torch.equal(layer[k], m[k]) for k in m) for (layer, alpha), m in zip(back, members, strict=True))
    with pytest.raises(ValueError, match=r"its 40 output rows are not the model's 4 parts of 8, 8, 8, 8 rows"):
        split_layer("linear1", fused, 2.0, 4, (8, 8, 8, 8))


def test_a_swapped_layer_swaps_the_halves_of_its_delta_and_back():
    gen = torch.Generator().manual_seed(3)
    layer = {"lora_A.weight": torch.randn(2, 8, generator=gen), "lora_B.weight": torch.randn(12, 2, generator=gen),
             "lora_magnitude_vector": torch.rand(12, generator=gen)}
    swapped = swap_halves("final", layer)
    delta = _delta(layer, 1.0)
    assert torch.equal(_delta(swapped, 1.0), torch.cat([delta[6:], delta[:6]]))
    assert torch.equal(swapped["lora_magnitude_vector"], torch.cat([layer["lora_magnitude_vector"][6:], layer["lora_magnitude_vector"][:6]]))
    assert all(torch.equal(v, layer[k]) for k, v in swap_halves("final", swapped).items())
    with pytest.raises(ValueError, match="'final' is written on a weight whose halves the original model swaps"):
        swap_halves("final", {"hada_w1_a": torch.zeros(8, 2)})


def test_what_does_not_fuse_exactly_is_refused_naming_the_way_out():
    loha = {"hada_w1_a": torch.zeros(8, 2), "hada_w1_b": torch.zeros(2, 8), "hada_w2_a": torch.zeros(8, 2), "hada_w2_b": torch.zeros(2, 8)}
    with pytest.raises(ValueError, match="'qkv' is written on the fused q/k/v weight.*DIFFUSERS_LORA"):
        fuse_layers("qkv", [loha] * 3)
    with pytest.raises(ValueError, match="'qkv': its 25 output rows do not split into 3"):
        split_layer("qkv", {"lora_A.weight": torch.zeros(3, 8), "lora_B.weight": torch.zeros(25, 3)}, None, 3)


@pytest.mark.parametrize(("missing", "widths"), [((1,), None), ((3,), (8, 8, 8, 16))], ids=["k-of-qkv", "mlp-of-linear1"])
def test_a_fused_weight_trained_in_part_is_the_trained_deltas_and_zeros_and_reads_back_as_them(missing, widths):
    """The members the layer filter left out are zero blocks at the same rank: the delta at
    alpha x count (alpha / rank unchanged) is the trained deltas and zero rows; reading drops them."""
    gen = torch.Generator().manual_seed(4)
    widths_or_equal = widths or (8, 8, 8)
    members = [None if i in missing else {"lora_A.weight": torch.randn(2, 8, generator=gen), "lora_B.weight": torch.randn(w, 2, generator=gen)}
               for i, w in enumerate(widths_or_equal)]
    members[0]["lora_B.weight"].zero_()  # a trained layer's up may be all zero (saved before the first step): it stays
    fused = fuse_layers("qkv", members, widths)
    count = len(members)
    assert fused["lora_A.weight"].shape == (2 * count, 8) and fused["lora_B.weight"].shape == (sum(widths_or_equal), 2 * count)
    expected = torch.cat([torch.zeros(w, 8) if m is None else _delta(m, 0.5) for m, w in zip(members, widths_or_equal, strict=True)])
    torch.testing.assert_close(_delta(fused, count * 0.5), expected, rtol=0, atol=1e-6)
    back = split_layer("qkv", fused, count * 0.5, count, widths)
    assert [got is None for got in back] == [m is None for m in members]
    for got, member in zip(back, members, strict=True):
        if member is not None:
            assert got[1] == 0.5 and all(torch.equal(got[0][k], member[k]) for k in member)


def test_a_fused_weight_trained_in_part_is_refused_for_dora_and_read_whole_when_not_block_diagonal():
    members = _members(dora=True)
    with pytest.raises(ValueError, match="'qkv' is one fused weight whose layers are trained only in part: DoRA would need"):
        fuse_layers("qkv", [members[0], None, members[2]])
    gen = torch.Generator().manual_seed(5)  # OneTrainer's one adapter on the fused weight, rows of k zero: every member kept
    fused = {"lora_A.weight": torch.randn(3, 8, generator=gen), "lora_B.weight": torch.randn(24, 3, generator=gen)}
    fused["lora_B.weight"][8:16] = 0
    assert all(got is not None for got in split_layer("qkv", fused, 3.0, 3))


def test_a_fused_weight_trained_in_part_writes_one_layer_and_reads_back_the_trained_ones(tmp_path):
    from safetensors.torch import load_file

    from ot_gradio.training.lora_format import KOHYA, load_lora_file, save_lora_parts

    names = {"transformer": {f"b.attention.{n}": "diffusion_model.b.attention.qkv" for n in ("to_q", "to_k", "to_v")}}
    trained = _members()
    qv = {f"b.attention.{n}.{k}": v for n, m in (("to_q", trained[0]), ("to_v", trained[2])) for k, v in m.items()}
    path = save_lora_parts(tmp_path / "k.safetensors", {"transformer": qv}, 2, 1.0, lora_format=KOHYA, module_names=names)
    file = load_file(str(path))
    assert sorted(file) == [f"diffusion_model.b.attention.qkv.{k}" for k in ("alpha", "lora_down.weight", "lora_up.weight")]
    assert file["diffusion_model.b.attention.qkv.alpha"].item() == 3.0 and file["diffusion_model.b.attention.qkv.lora_down.weight"].shape[0] == 6
    loaded = load_lora_file(path, module_names=names)
    assert (loaded.rank, loaded.alpha) == (2, 1.0) and loaded.parts["transformer"].keys() == qv.keys()
    assert all(torch.equal(loaded.parts["transformer"][k], v) for k, v in qv.items())


@pytest.mark.parametrize("model_type", ["IDEOGRAM_4", "HUNYUAN_VIDEO"])
@pytest.mark.parametrize(("settings", "said"), [
    ({"peft_type": "LOHA"}, "LOHA's do not"), ({"lora_decompose": True}, "DoRA (lora_decompose)'s do not"),
])
def test_an_adapter_that_does_not_fuse_is_refused_before_the_run_for_the_fused_formats(settings, said, model_type):
    from ot_gradio.config.doctor import errors
    from ot_gradio.config.io import load_config

    base = {"model_type": model_type, "training_method": "LORA", **settings}
    problems = [p for p in errors(load_config({**base, "output_model_format": "COMFY_LORA"}).config) if "fused qkv" in p]
    assert len(problems) == 1 and said in problems[0] and problems[0].endswith("or save as DIFFUSERS_LORA")
    assert not [p for p in errors(load_config({**base, "output_model_format": "DIFFUSERS_LORA"}).config) if "fused qkv" in p]
    assert not [p for p in errors(load_config({"model_type": model_type, "training_method": "LORA",
                                               "output_model_format": "COMFY_LORA"}).config) if "fused qkv" in p]
    # a layer filter that trains part of a fused weight: refused the same (no filter would let it fuse), before the run
    partial = [p for p in errors(load_config({**base, "output_model_format": "COMFY_LORA", "layer_filter_preset": "attn-only"}).config)
               if "fused qkv" in p]
    assert partial == problems


# model type, layer filter settings that train part of a fused weight, a fused layer written with zero blocks
PARTIAL = [("IDEOGRAM_4", {"layer_filter_preset": "custom", "layer_filter": "to_q,to_out"}, "diffusion_model.layers.0.attention.qkv"),
           ("HUNYUAN_VIDEO", {"layer_filter_preset": "attn-only"},  # the single blocks' q, k, v without their MLP input
            "diffusion_model.single_blocks.0.linear1")]


@pytest.mark.parametrize(("model_type", "layers", "fused"), PARTIAL, ids=[p[0] for p in PARTIAL])
def test_a_layer_filter_that_takes_part_of_a_fused_weight_trains_and_saves_the_layers_it_took(model_type, layers, fused, tmp_path):
    from safetensors import safe_open

    from ot_gradio.config.doctor import errors
    from ot_gradio.config.io import load_config
    from ot_gradio.models.hunyuan_video import HunyuanVideo
    from ot_gradio.models.ideogram4 import Ideogram4
    from ot_gradio.models.tiny.hunyuan_video import tiny_hunyuan_video_components
    from ot_gradio.models.tiny.ideogram4 import tiny_ideogram4_components
    from ot_gradio.training.lora import lora_state_dict
    from ot_gradio.training.lora_format import load_lora_file
    from ot_gradio.training.lora_method import kohya_module_names
    from ot_gradio.training.methods import get_method

    cfg = load_config({"model_type": model_type, "training_method": "LORA", "output_model_format": "COMFY_LORA", **layers,
                       "text_encoder": {"train": False}, "text_encoder_2": {"train": False}}).config
    assert not [p for p in errors(cfg) if "fused" in p]
    model = Ideogram4(tiny_ideogram4_components()) if model_type == "IDEOGRAM_4" else HunyuanVideo(tiny_hunyuan_video_components())
    method = get_method(cfg.training_method)
    method.setup(model, cfg, torch.device("cpu"))
    path = method.save(model, cfg, tmp_path / "partial.safetensors", {})
    with safe_open(str(path), "pt") as f:
        assert f"{fused}.lora_down.weight" in f.keys()
    loaded = load_lora_file(path, module_names=kohya_module_names(model), denoiser=model.denoiser)
    expected = lora_state_dict(model.transformer)
    assert loaded.parts.keys() == {"transformer"} and loaded.parts["transformer"].keys() == expected.keys()
    assert all(torch.equal(loaded.parts["transformer"][k], v) for k, v in expected.items())
