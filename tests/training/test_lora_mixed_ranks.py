"""LyCORIS LoKr files whose layers have different ranks (`conv_dim` under `dim`, `decompose_both`, Tucker
convolutions, whole-matrix layers beside them): read, continued as Base LoRA, converted and sampled with
each layer's delta as LyCORIS applies it, kron(w1, w2) * alpha / rank, at scale 1 where w1 and w2 are
both whole (lycoris/modules/lokr.py: `alpha = lora_dim` when use_w1 and use_w2; alpha missing or 0 is
lora_dim too). Whole-matrix w2 layers beside products (where peft would build a product at the file's rank)
continue whole and save as LyCORIS reads them. Tucker-form LoHa files of different ranks read exactly too. OFT
files of several block sizes are refused naming their layers and sizes, one-block layers (a block over the
layer's whole input) among them."""

from __future__ import annotations

import functools

import pytest
import torch
from safetensors.torch import save_file

from ot_gradio.training.lora_reading import load_lora_file

SD15 = "STABLE_DIFFUSION_15"
G = torch.Generator().manual_seed(7)


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=G) * 0.1


# module path on the tiny SD 1.5 UNet (its weight shape) -> the layer's LyCORIS entries (factor -1:
# 128 = 8 x 16, 16 = 4 x 4, 32 = 4 x 8, 256 = 16 x 16) and alpha; ranks 4, 2, 2, 3 and 3
LAYERS = {
    # dim 4: w1 whole, w2 a product
    "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj": (
        (128, 16), lambda: {"lokr_w1": rand(8, 4), "lokr_w2_a": rand(16, 4), "lokr_w2_b": rand(4, 4)}, 2.0),
    "down_blocks.0.attentions.1.transformer_blocks.0.ff.net.0.proj": (
        (128, 16), lambda: {"lokr_w1": rand(8, 4), "lokr_w2_a": rand(16, 2), "lokr_w2_b": rand(2, 4)}, 2.0),
    # w1 and w2 both whole (LyCORIS's full matrix): scale 1 whatever the alpha (LyCORIS writes its dim there)
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q": (
        (16, 16), lambda: {"lokr_w1": rand(4, 4), "lokr_w2": rand(4, 4)}, 10000.0),
    # conv_dim 2 on a 3x3 convolution: w2_b is (rank, in_n * 3 * 3)
    "down_blocks.2.resnets.1.conv1": (
        (32, 32, 3, 3), lambda: {"lokr_w1": rand(4, 4), "lokr_w2_a": rand(8, 2), "lokr_w2_b": rand(2, 72)}, 1.0),
    # use_tucker: w2 = lokr_t2 contracted with w2_a (rank, out_k) and w2_b (rank, in_n)
    "down_blocks.2.resnets.0.conv2": (
        (32, 32, 3, 3), lambda: {"lokr_w1": rand(4, 4), "lokr_t2": rand(3, 3, 3, 3), "lokr_w2_a": rand(3, 8), "lokr_w2_b": rand(3, 8)}, 1.5),
    # decompose_both: w1 a product too (LyCORIS takes the rank from w1_a)
    "down_blocks.2.attentions.0.transformer_blocks.0.ff.net.0.proj": (
        (256, 32), lambda: {"lokr_w1_a": rand(16, 3), "lokr_w1_b": rand(3, 4), "lokr_w2_a": rand(16, 3), "lokr_w2_b": rand(3, 8)}, 6.0),
}


def kron(t: dict[str, torch.Tensor]) -> torch.Tensor:
    """kron(w1, w2) of one layer's LoKr entries, each factor whole, a product or (w2) a Tucker product."""
    w1 = t["lokr_w1"] if "lokr_w1" in t else t["lokr_w1_a"] @ t["lokr_w1_b"]
    if "lokr_w2" in t:
        w2 = t["lokr_w2"]
    elif "lokr_t2" in t:
        w2 = torch.einsum("ijkl,ip,jr->prkl", t["lokr_t2"], t["lokr_w2_a"], t["lokr_w2_b"])
    else:
        w2 = t["lokr_w2_a"] @ t["lokr_w2_b"]
    if w2.dim() == 4:
        w1 = w1[:, :, None, None]
    return torch.kron(w1.float(), w2.float().contiguous())


def lycoris_scale(t: dict[str, torch.Tensor], alpha: float | None) -> float:
    if "lokr_w1" in t and "lokr_w2" in t:
        return 1.0
    rank = t["lokr_w1_a"].shape[1] if "lokr_w1_a" in t else t["lokr_w2_b"].shape[0]
    return (alpha or rank) / rank


def lycoris_file(path, layers=None) -> dict[str, torch.Tensor]:
    """`layers` (LAYERS) in LyCORIS's kohya names (`lora_unet_<path>.lokr_*`, `.alpha`); module path ->
    the delta LyCORIS applies."""
    tensors, want = {}, {}
    for module_path, (shape, entries, alpha) in (LAYERS if layers is None else layers).items():
        t = entries()
        name = "lora_unet_" + module_path.replace(".", "_")
        tensors.update({f"{name}.{k}": v for k, v in t.items()} | {f"{name}.alpha": torch.tensor(alpha)})
        want[module_path] = (kron(t) * lycoris_scale(t, alpha)).reshape(shape)
    save_file(tensors, str(path))
    return want


def layers_of(sd: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    from ot_gradio.training.lora_layer_entries import group_layers

    return group_layers(sd)


def read_deltas(path) -> dict[str, torch.Tensor]:
    """Module path -> delta of the file as the reader gives it (peft form: every layer at alpha / rank),
    computed by the merge tool's own delta (tools/convert.py)."""
    from ot_gradio.tools.convert import _lora_delta

    loaded = load_lora_file(path)
    assert loaded.rank == 4  # the largest rank; the others padded with zeros
    return {p: _lora_delta(t, torch.Size(LAYERS[p][0])) * (loaded.alpha / loaded.rank) for p, t in layers_of(loaded.parts["unet"]).items()}


def assert_deltas(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for key, w in want.items():
        torch.testing.assert_close(got[key].float(), w, rtol=1e-5, atol=1e-6, msg=key)


def test_lokr_layers_of_different_ranks_read_as_lycoris_applies_them(tmp_path):
    """They were refused ("LoKr ... layers of different ranks cannot continue")."""
    want = lycoris_file(tmp_path / "lokr.safetensors")
    assert_deltas(read_deltas(tmp_path / "lokr.safetensors"), want)
    layers = layers_of(load_lora_file(tmp_path / "lokr.safetensors").parts["unet"])
    conv, tucker = layers["down_blocks.2.resnets.1.conv1"], layers["down_blocks.2.resnets.0.conv2"]
    assert conv["lokr_w2_a"].shape == (8, 4) and conv["lokr_w2_b"].shape == (4, 72)  # zero-padded to rank 4
    assert not conv["lokr_w2_a"][:, 2:].any() and not conv["lokr_w2_b"][2:].any()
    assert tucker["lokr_t2"].shape == (4, 4, 3, 3) and tucker["lokr_w2_a"].shape == (4, 8) and tucker["lokr_w2_b"].shape == (4, 8)


def test_tucker_loha_layers_of_different_ranks_read_exactly(tmp_path):
    """LyCORIS' LoHa with use_tucker (a core hada_t1 / hada_t2 on kxk convolutions) and conv_dim 2 under dim 4:
    the core padded on its two rank axes, w1_a / w1_b (rank, side) on axis 0; delta (w1 * w2) * alpha / rank."""
    from ot_gradio.tools.convert import _lora_delta

    def tucker(t, a, b):
        return torch.einsum("ijkl,jr,ip->prkl", t, b, a)

    conv = {"hada_t1": rand(2, 2, 3, 3), "hada_w1_a": rand(2, 32), "hada_w1_b": rand(2, 32),
            "hada_t2": rand(2, 2, 3, 3), "hada_w2_a": rand(2, 32), "hada_w2_b": rand(2, 32)}
    linear = {"hada_w1_a": rand(16, 4), "hada_w1_b": rand(4, 16), "hada_w2_a": rand(16, 4), "hada_w2_b": rand(4, 16)}
    save_file({**{f"lora_unet_a_conv.{k}": v for k, v in conv.items()}, "lora_unet_a_conv.alpha": torch.tensor(1.0),
               **{f"lora_unet_b_to_q.{k}": v for k, v in linear.items()}, "lora_unet_b_to_q.alpha": torch.tensor(4.0)},
              str(tmp_path / "loha.safetensors"))
    want = {"a.conv": tucker(conv["hada_t1"], conv["hada_w1_a"], conv["hada_w1_b"])
                      * tucker(conv["hada_t2"], conv["hada_w2_a"], conv["hada_w2_b"]) * (1.0 / 2),
            "b.to_q": (linear["hada_w1_a"] @ linear["hada_w1_b"]) * (linear["hada_w2_a"] @ linear["hada_w2_b"]) * (4.0 / 4)}
    loaded = load_lora_file(tmp_path / "loha.safetensors")
    layers = layers_of(loaded.parts["unet"])
    assert loaded.rank == 4 and layers["a.conv"]["hada_t1"].shape == (4, 4, 3, 3)
    assert_deltas({p: _lora_delta(t, want[p].shape) * (loaded.alpha / loaded.rank) for p, t in layers.items()}, want)


@functools.cache
def _components() -> dict:
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    return tiny_sd15_components()


def test_they_continue_as_base_lora_with_each_layers_delta(tmp_path):
    """peft builds every layer at the largest rank: a factor it builds whole there (the rank-2 convolution's
    w2 at rank 4, the Tucker one's, decompose_both's w1 when not every layer has one) takes the file's
    product multiplied out (lora._whole_lokr_factors), the same delta."""
    import copy

    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.training.lora_method import LoraMethod

    want = lycoris_file(tmp_path / "lokr.safetensors")
    m = StableDiffusion15(**copy.deepcopy(_components()))
    config = TrainConfig.model_validate({"model_type": SD15, "lora_model_name": str(tmp_path / "lokr.safetensors"), "peft_type": "LOKR"})
    LoraMethod().setup(m, config, torch.device("cpu"))
    for module_path, w in want.items():
        layer = m.unet.get_submodule(module_path).eval()
        with torch.no_grad():
            if w.dim() == 2:  # what the forward adds, on the identity
                x = torch.eye(w.shape[1])
                got = (layer(x) - layer.base_layer(x)).T
            else:
                got = layer.get_delta_weight("default")
        torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-6, msg=module_path)
    conv = m.unet.get_submodule("down_blocks.2.resnets.1.conv1")
    assert "default" in conv.lokr_w2 and "default" not in conv.lokr_w2_a  # built whole at rank 4: the product multiplied out


@pytest.mark.parametrize("to", ["diffusers", "kohya"])
def test_the_convert_tool_keeps_each_layers_delta(to, tmp_path):
    from ot_gradio.tools.jobs import run_inline

    want = lycoris_file(tmp_path / "lokr.safetensors")
    out = run_inline("convert", {"operation": "lora", "model_type": SD15, "input": str(tmp_path / "lokr.safetensors"),
                                 "output": str(tmp_path / f"{to}.safetensors"), "to": to})
    assert out["rank"] == 4
    assert_deltas(read_deltas(out["output"]), want)


def test_oft_layers_of_different_block_sizes_are_refused_naming_them(tmp_path):
    """A block size peft fitted to a layer's inputs is one size; 4 and 8 on layers of 16 inputs are two."""
    from ot_gradio.training.lora_layer_entries import check_start_file
    from ot_gradio.training.lora_variants import AdapterSpec

    q, ff = "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q", "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj"
    ff2 = ff.replace("attentions.0", "attentions.1")
    tensors = {f"lora_unet_{ff.replace('.', '_')}.oft_R.weight": rand(4, 6), f"lora_unet_{ff2.replace('.', '_')}.oft_R.weight": rand(4, 6),
               f"lora_unet_{q.replace('.', '_')}.oft_R.weight": rand(2, 28)}
    save_file(tensors, str(tmp_path / "oft.safetensors"))
    parts = load_lora_file(tmp_path / "oft.safetensors").parts  # read (the Convert tool's merge takes it as it is)
    with pytest.raises(ValueError, match=rf"^lora_model_name: .*oft.safetensors: OFT layers of different block sizes "
                                         rf"\(block size 4: 2 layer\(s\) \(unet.{ff}, unet.{ff2}\); block size 8: 1 layer\(s\) "
                                         rf"\(unet.{q}\)\)\. .*Tools > Convert \(merge\)"):
        check_start_file(AdapterSpec(peft_type="OFT_2"), parts, tmp_path / "oft.safetensors")
    # one size as peft fits it to each layer: 8, and 6 on a layer of 12 inputs (8 does not divide them)
    fitted = {"lora_unet_a_to_q.oft_R.weight": rand(2, 28), "lora_unet_b_to_q.oft_R.weight": rand(2, 28),
              "lora_unet_c_to_q.oft_R.weight": rand(2, 15)}
    save_file(fitted, str(tmp_path / "fitted.safetensors"))
    path = tmp_path / "fitted.safetensors"
    assert check_start_file(AdapterSpec(peft_type="OFT_2"), load_lora_file(path).parts, path).oft_block_size == 8


def _oft_file(path, layers: dict[str, tuple[int, int]]) -> dict:
    """A OneTrainer OFT file of module path -> (blocks, block size), read as Base LoRA reads it."""
    tensors = {f"lora_unet_{p.replace('.', '_')}.oft_R.weight": rand(n, b * (b - 1) // 2) for p, (n, b) in layers.items()}
    save_file(tensors, str(path))
    return load_lora_file(path).parts


def test_one_block_oft_layers_beside_others_are_listed_with_their_size(tmp_path):
    """A layer of one block (peft's block for an oft_block_size at least its inputs) is its whole input: beside
    layers of several blocks it was judged by nothing and continued at another size, failing with a shape error."""
    from ot_gradio.training.lora_layer_entries import check_start_file
    from ot_gradio.training.lora_variants import AdapterSpec

    q, ff = "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q", "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj"
    k = q.replace("to_q", "to_k")  # 16 inputs each: blocks of 4, and one block of 16
    parts = _oft_file(tmp_path / "oft.safetensors", {q: (4, 4), ff: (4, 4), k: (1, 16)})
    with pytest.raises(ValueError, match=rf"^lora_model_name: .*oft.safetensors: OFT layers of different block sizes "
                                         rf"\(block size 4: 2 layer\(s\) \(unet.{q}, unet.{ff}\); block size 16: 1 layer\(s\) "
                                         rf"\(unet.{k}\); 1 of them one block over the layer's whole input \(unet.{k}\), "
                                         rf"from an oft_block_size at least the layer's inputs\)\. .*Tools > Convert \(merge\)"):
        check_start_file(AdapterSpec(peft_type="OFT_2"), parts, tmp_path / "oft.safetensors")


def test_one_block_oft_layers_of_a_larger_block_size_continue(tmp_path):
    """oft_block_size 32: one block of 16 on each layer of 16 inputs, two of 32 on ff.net.2's 64. The most common
    size (16) was taken and the 64-input layer refused; 32 is the one size every layer is."""
    import copy

    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.training.lora import lora_state_dict
    from ot_gradio.training.lora_method import LoraMethod

    block = "down_blocks.0.attentions.0.transformer_blocks.0."
    layers = {block + "attn1.to_q": (1, 16), block + "attn1.to_k": (1, 16), block + "attn1.to_v": (1, 16),
              block + "ff.net.2": (2, 32), block + "attn2.to_k": (1, 32)}
    parts = _oft_file(tmp_path / "oft.safetensors", layers)
    m = StableDiffusion15(**copy.deepcopy(_components()))
    config = TrainConfig.model_validate({"model_type": SD15, "lora_model_name": str(tmp_path / "oft.safetensors"),
                                         "peft_type": "OFT_2", "oft_block_size": 4})
    LoraMethod().setup(m, config, torch.device("cpu"))
    got = lora_state_dict(m.unet)
    assert sorted(got) == sorted(parts["unet"])
    for key, t in parts["unet"].items():
        torch.testing.assert_close(got[key], t, msg=key)


def test_the_sample_tool_puts_them_on_the_model_as_base_lora_does(tmp_path):
    import copy

    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.tools.sample import apply_lora

    want = lycoris_file(tmp_path / "lokr.safetensors")
    m = StableDiffusion15(**copy.deepcopy(_components()))
    assert apply_lora(m, str(tmp_path / "lokr.safetensors"), 1.0) == (len(want), 0)
    for module_path, w in want.items():
        with torch.no_grad():
            got = m.unet.get_submodule(module_path).get_delta_weight("default")
        torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-6, msg=module_path)


# LyCORIS's whole-matrix layers (lokr_w2 stored whole: its dim at least half the factor's side, full_matrix, or a
# conv_dim above dim) beside rank-2 products: peft at rank 2 would build those w2 as products. Module path -> (weight
# shape, entries, alpha); 128 = 8 x 16, 16 = 4 x 4, 256 = 16 x 16, 32 = 4 x 8
WHOLE = {
    # w1 and w2 whole: scale 1 whatever the alpha
    "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj": (
        (128, 16), lambda: {"lokr_w1": rand(8, 4), "lokr_w2": rand(16, 4)}, 10000.0),
    "down_blocks.0.attentions.1.transformer_blocks.0.ff.net.0.proj": (
        (128, 16), lambda: {"lokr_w1": rand(8, 4), "lokr_w2_a": rand(16, 2), "lokr_w2_b": rand(2, 4)}, 1.0),
    # decompose_both's w1 a product (rank 2), w2 whole: scale alpha / 2
    "down_blocks.2.attentions.0.transformer_blocks.0.ff.net.0.proj": (
        (256, 32), lambda: {"lokr_w1_a": rand(16, 2), "lokr_w1_b": rand(2, 4), "lokr_w2": rand(16, 8)}, 1.5),
    # a 3x3 convolution's whole w2 (out_k, in_n, 3, 3)
    "down_blocks.2.resnets.1.conv1": (
        (32, 32, 3, 3), lambda: {"lokr_w1": rand(4, 4), "lokr_w2": rand(8, 8, 3, 3)}, 4.0),
    # use_tucker at rank 2 (peft builds w2 whole only from rank 4 here)
    "down_blocks.2.resnets.0.conv2": (
        (32, 32, 3, 3), lambda: {"lokr_w1": rand(4, 4), "lokr_t2": rand(2, 2, 3, 3), "lokr_w2_a": rand(2, 8), "lokr_w2_b": rand(2, 8)}, 2.0),
}


def whole_file(path) -> dict[str, torch.Tensor]:
    return lycoris_file(path, WHOLE)


def test_whole_matrix_layers_beside_products_continue_and_save_as_lycoris_reads_them(tmp_path):
    """They failed to load ("has ['lokr_w1', 'lokr_w2_a', 'lokr_w2_b'], got ['lokr_w1', 'lokr_w2']"): peft builds w2
    whole only where the rank is at least half its side. A w2 the file holds whole is built whole, so it continues as
    it was trained; the file written again applies each layer's delta in LyCORIS's / ComfyUI's formula."""
    import copy

    from safetensors.torch import load_file

    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.training.lora_format import save_lora
    from ot_gradio.training.lora_method import LoraMethod
    from tests.lora_reference import _reference_weight

    want = whole_file(tmp_path / "whole.safetensors")
    m = StableDiffusion15(**copy.deepcopy(_components()))
    config = TrainConfig.model_validate({"model_type": SD15, "lora_model_name": str(tmp_path / "whole.safetensors"),
                                         "peft_type": "LOKR"})
    groups = LoraMethod().setup(m, config, torch.device("cpu"))
    trained = {id(p) for g in groups for p in g.params}
    for module_path, w in want.items():
        layer = m.unet.get_submodule(module_path).eval()
        with torch.no_grad():
            torch.testing.assert_close(layer.get_delta_weight("default"), w, rtol=1e-4, atol=1e-6, msg=module_path)
        if "lokr_w2" in WHOLE[module_path][1]():  # the file's whole w2 trains whole
            assert "default" in layer.lokr_w2 and id(layer.lokr_w2["default"]) in trained
    x = torch.randn(3, 16)  # the forward adds that delta
    ff = m.unet.get_submodule("down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj")
    with torch.no_grad():
        torch.testing.assert_close(ff(x) - ff.base_layer(x), x @ want[ff_path()].T, rtol=1e-4, atol=1e-5)

    path = save_lora(tmp_path / "again.safetensors", unet=m.unet)
    tensors = load_file(str(path))
    layers: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        name, _, entry = key.partition(".")
        layers.setdefault(name, {})[entry] = value
    for module_path, w in want.items():
        entries = layers["lora_unet_" + module_path.replace(".", "_")]
        assert ("lokr_w2" in entries) == ("lokr_w2" in WHOLE[module_path][1]())
        got = _reference_weight(torch.zeros(w.shape), entries)
        torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-6, msg=module_path)


def ff_path() -> str:
    return "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj"


@pytest.mark.parametrize("to", ["diffusers", "kohya"])
def test_the_convert_tool_keeps_whole_matrix_layers_deltas(to, tmp_path):
    from ot_gradio.tools.convert import _lora_delta
    from ot_gradio.tools.jobs import run_inline

    want = whole_file(tmp_path / "whole.safetensors")
    out = run_inline("convert", {"operation": "lora", "model_type": SD15, "input": str(tmp_path / "whole.safetensors"),
                                 "output": str(tmp_path / f"{to}.safetensors"), "to": to})
    loaded = load_lora_file(out["output"])
    got = {p: _lora_delta(t, torch.Size(WHOLE[p][0])) * (loaded.alpha / loaded.rank) for p, t in layers_of(loaded.parts["unet"]).items()}
    assert_deltas(got, want)
