"""LoRA files of other tools continued as *Base LoRA* (`lora_model_name`): each layer's delta
as the file means it (what ComfyUI or diffusers apply), on the tiny models; what cannot be read
is refused naming the field and the file. Built by hand in each tool's layout, as the tools'
sources write them (sd-scripts networks/lora_flux.py, musubi-tuner networks/lora_flux_2.py,
ComfyUI, ai-toolkit, OneTrainer)."""

from __future__ import annotations

import functools

import pytest
import torch
from safetensors.torch import save_file

from ot_gradio.config.schema import TrainConfig
from ot_gradio.models.original_lora_names import original_lora_names
from ot_gradio.training.lora_method import LoraMethod
from ot_gradio.training.lora_reading import load_lora_file


@functools.cache
def _components(name: str) -> dict:
    if name == "flux":
        from ot_gradio.models.tiny.flux import tiny_flux_components

        return tiny_flux_components()
    if name == "chroma":
        from ot_gradio.models.tiny.chroma import tiny_chroma_components

        return tiny_chroma_components()
    if name == "flux2":
        from ot_gradio.models.tiny.flux2 import tiny_flux2_components

        return tiny_flux2_components("klein")
    if name == "qwen":
        from ot_gradio.models.tiny.qwen_image import tiny_qwen_image_components

        return tiny_qwen_image_components()
    if name == "wan":
        from ot_gradio.models.tiny.wan import tiny_wan_components

        return tiny_wan_components()
    if name == "sdxl":
        from ot_gradio.models.tiny.sdxl import tiny_sdxl_components

        return tiny_sdxl_components()
    if name == "zimage":
        from ot_gradio.models.tiny.z_image import tiny_z_image_components

        return tiny_z_image_components()
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    return tiny_sd15_components()


def model(name: str):
    """A fresh tiny model (its modules copied: a setup wraps them in LoRA layers)."""
    import copy

    components = copy.deepcopy(_components(name))
    if name == "flux":
        from ot_gradio.models.flux import FluxDev1

        return FluxDev1(components)
    if name == "chroma":
        from ot_gradio.models.chroma import Chroma1

        return Chroma1(components)
    if name == "flux2":
        from ot_gradio.models.flux2 import Flux2

        return Flux2(components)
    if name == "qwen":
        from ot_gradio.models.qwen_image import QwenImage

        return QwenImage(components)
    if name == "wan":
        from ot_gradio.models.wan import Wan21

        return Wan21(components)
    if name == "sdxl":
        from ot_gradio.models.sdxl import StableDiffusionXL

        return StableDiffusionXL(**components)
    if name == "zimage":
        from ot_gradio.models.z_image import ZImage

        return ZImage(components)
    from ot_gradio.models.sd15 import StableDiffusion15

    return StableDiffusion15(**components)


def setup(m, path, **options):
    config = TrainConfig.model_validate({"model_type": m.model_type, "lora_model_name": str(path), **options})
    return LoraMethod().setup(m, config, torch.device("cpu"))


def rand(*shape, seed=[0]):  # noqa: B006 (a counter: every tensor differs)
    seed[0] += 1
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed[0])) * 0.1


def loaded_deltas(m, path) -> dict[str, torch.Tensor]:
    """{part.module path: delta W} of the file as read for model `m` (alpha / rank applied)."""
    got = load_lora_file(path, m.lora_module_names(), m.denoiser, read_names=original_lora_names(m))
    out = {}
    for part, sd in got.parts.items():
        for key, a in sd.items():
            if key.endswith(".lora_A.weight"):
                path_ = key.removesuffix(".lora_A.weight")
                out[f"{part}.{path_}"] = sd[f"{path_}.lora_B.weight"].float() @ a.float() * (got.alpha / got.rank)
    return out


def _swap(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a])


# original (BFL) layer -> (its diffusers members in row order, halves swapped); checked by hand against
# diffusers' convert_flux_transformer_checkpoint_to_diffusers / convert_flux2_transformer_checkpoint_to_diffusers
BFL = {
    "flux": {"double_blocks.0.img_attn.qkv": (["attn.to_q", "attn.to_k", "attn.to_v"], False),
             "double_blocks.0.txt_attn.qkv": (["attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"], False),
             "double_blocks.0.img_attn.proj": (["attn.to_out.0"], False),
             "double_blocks.0.txt_mlp.2": (["ff_context.net.2"], False),
             "double_blocks.0.img_mod.lin": (["norm1.linear"], False),
             "single_blocks.0.linear1": (["attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"], False),
             "single_blocks.0.linear2": (["proj_out"], False),
             "final_layer.adaLN_modulation.1": (["norm_out.linear"], True),
             "img_in": (["x_embedder"], False)},
    "chroma": {"double_blocks.0.img_attn.qkv": (["attn.to_q", "attn.to_k", "attn.to_v"], False),
               "double_blocks.0.img_mlp.0": (["ff.net.0.proj"], False),
               "single_blocks.0.linear1": (["attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"], False),
               "distilled_guidance_layer.in_proj": (["distilled_guidance_layer.in_proj"], False)},
    "flux2": {"double_blocks.0.img_attn.qkv": (["attn.to_q", "attn.to_k", "attn.to_v"], False),
              "double_blocks.0.txt_attn.qkv": (["attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"], False),
              "double_blocks.0.img_mlp.0": (["ff.linear_in"], False),
              "single_blocks.0.linear1": (["attn.to_qkv_mlp_proj"], False),
              "single_blocks.0.linear2": (["attn.to_out"], False),
              "final_layer.adaLN_modulation.1": (["norm_out.linear"], True)},
    # ComfyUI's Z-Image (Lumina2): q, k, v fused (a musubi-tuner file converted for ComfyUI)
    "zimage": {"layers.0.attention.qkv": (["attention.to_q", "attention.to_k", "attention.to_v"], False),
               "layers.0.attention.out": (["attention.to_out.0"], False)},
}


def _member_path(original: str, member: str) -> str:
    block, index = (original.split(".") + [""])[:2]
    if block == "double_blocks":
        return f"transformer_blocks.{index}.{member}"
    if block == "single_blocks":
        return f"single_transformer_blocks.{index}.{member}"
    if block == "layers":
        return f"layers.{index}.{member}"
    return member


def bfl_file(name: str, path, spell, entries=("lora_down.weight", "lora_up.weight"), alpha: float | None = 2.0, rank: int = 4):
    """A LoRA on some original (BFL) layers of the tiny model, names spelled by `spell`; and the
    delta each diffusers layer should get ({transformer.<path>: delta})."""
    modules = dict(model(name).transformer.named_modules())
    tensors, want = {}, {}
    for original, (members, swap) in BFL[name].items():
        paths = [_member_path(original, m) for m in members]
        widths = [modules[p].out_features for p in paths]
        down, up = rand(rank, modules[paths[0]].in_features), rand(sum(widths), rank)
        tensors[f"{spell(original)}.{entries[0]}"], tensors[f"{spell(original)}.{entries[1]}"] = down, up
        if alpha is not None:
            tensors[f"{spell(original)}.alpha"] = torch.tensor(alpha)
        full = up @ down * ((alpha or rank) / rank)
        full = _swap(full) if swap else full
        start = 0
        for p, w in zip(paths, widths, strict=True):
            want[f"transformer.{p}"] = full[start:start + w]
            start += w
    save_file(tensors, str(path))
    return want


def assert_deltas(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        torch.testing.assert_close(got[k], w, rtol=1e-5, atol=1e-6, msg=k)


KOHYA_UNET = ("sd-scripts", lambda o: "lora_unet_" + o.replace(".", "_"))  # sd-scripts, musubi-tuner, OneTrainer KOHYA_LORA
COMFY = ("comfyui", lambda o: "diffusion_model." + o)


@pytest.mark.parametrize("name", ["flux", "chroma", "flux2", "zimage"])
@pytest.mark.parametrize("tool", [KOHYA_UNET, COMFY], ids=lambda t: t[0])
def test_original_layer_names_read_fused_layers_onto_ours_exactly(name, tool, tmp_path):
    want = bfl_file(name, tmp_path / "bfl.safetensors", tool[1])
    assert_deltas(loaded_deltas(model(name), tmp_path / "bfl.safetensors"), want)


def applied(m, part: str, path: str) -> torch.Tensor:
    """The delta the LoRA layer at `path` of the set-up model adds (peft's B A scaling)."""
    layer = getattr(m, part).get_submodule(path)
    return layer.lora_B["default"].weight @ layer.lora_A["default"].weight * layer.scaling["default"]


def test_a_kohya_flux_file_continues_as_base_lora(tmp_path):
    want = bfl_file("flux", tmp_path / "bfl.safetensors", KOHYA_UNET[1])
    m = model("flux")
    assert "transformer" in [g.name for g in setup(m, tmp_path / "bfl.safetensors")]
    for key in ("transformer.transformer_blocks.0.attn.to_k", "transformer.single_transformer_blocks.0.proj_mlp"):
        torch.testing.assert_close(applied(m, *key.split(".", 1)), want[key], rtol=1e-5, atol=1e-6)


def test_layers_of_another_model_are_refused_with_a_guess(tmp_path):
    bfl_file("flux", tmp_path / "flux.safetensors", KOHYA_UNET[1])
    with pytest.raises(ValueError, match=r"^lora_model_name: .*flux.safetensors: \d+ transformer layer\(s\) this QWEN model "
                                         r"does not have .*look like Flux.1's, Chroma's, Flux.2's"):
        setup(model("qwen"), tmp_path / "flux.safetensors")


# a few layers of each family as other tools name them -> the denoiser's module (by hand: diffusers' converters)
NAMED = {
    "wan": {"blocks.0.self_attn.q": "blocks.0.attn1.to_q", "blocks.0.cross_attn.o": "blocks.0.attn2.to_out.0",
            "blocks.0.ffn.0": "blocks.0.ffn.net.0.proj", "head.head": "proj_out"},
    "qwen": {"transformer_blocks.0.attn.to_q": "transformer_blocks.0.attn.to_q", "img_in": "img_in",
             "transformer_blocks.0.img_mlp.net.2": "transformer_blocks.0.img_mlp.net.2"},
    "sdxl": {"input_blocks.7.1.transformer_blocks.1.attn1.to_k": "down_blocks.2.attentions.0.transformer_blocks.1.attn1.to_k",
             "middle_block.1.transformer_blocks.0.attn2.to_v": "mid_block.attentions.0.transformer_blocks.0.attn2.to_v"},
    "sd15": {"middle_block.1.transformer_blocks.0.attn2.to_v": "mid_block.attentions.0.transformer_blocks.0.attn2.to_v",
             "input_blocks.4.1.transformer_blocks.0.ff.net.2": "down_blocks.1.attentions.0.transformer_blocks.0.ff.net.2"},
}
PEFT_ENTRIES = ("lora_A.weight", "lora_B.weight")


def named_file(name: str, path, spell, entries=("lora_down.weight", "lora_up.weight"), alpha: float | None = 2.0, rank: int = 4):
    """A LoRA on NAMED[name]'s layers, spelled by `spell`; and each module's wanted delta."""
    m = model(name)
    modules = dict(getattr(m, m.denoiser).named_modules())
    tensors, want = {}, {}
    for layer, module_path in NAMED[name].items():
        linear = modules[module_path]
        down, up = rand(rank, linear.in_features), rand(linear.out_features, rank)
        tensors[f"{spell(layer)}.{entries[0]}"], tensors[f"{spell(layer)}.{entries[1]}"] = down, up
        if alpha is not None:
            tensors[f"{spell(layer)}.alpha"] = torch.tensor(alpha)
        want[f"{m.denoiser}.{module_path}"] = up @ down * ((alpha or rank) / rank)
    save_file(tensors, str(path))
    return want


@pytest.mark.parametrize("name", list(NAMED))
@pytest.mark.parametrize(("entries", "alpha"), [(PEFT_ENTRIES, None), (PEFT_ENTRIES, 2.0), (("lora_down.weight", "lora_up.weight"), 2.0)],
                         ids=["peft", "peft-alpha", "kohya"])
def test_comfyui_diffusion_model_names_read_as_the_denoisers_layers(name, entries, alpha, tmp_path):
    """ComfyUI's, ai-toolkit's, musubi-tuner's (convert_lora --target other) and OneTrainer's COMFY_LORA files."""
    want = named_file(name, tmp_path / "dm.safetensors", COMFY[1], entries, alpha)
    assert_deltas(loaded_deltas(model(name), tmp_path / "dm.safetensors"), want)


@pytest.mark.parametrize("name", ["flux", "flux2"])
def test_original_names_with_peft_entries_and_no_alpha(name, tmp_path):
    """ai-toolkit's Flux.2 / Chroma files (alpha = rank), OneTrainer's ORIGINAL_LORA (bare original names)."""
    for label, spell in (COMFY, ("bare", lambda o: o)):
        want = bfl_file(name, tmp_path / f"{label}.safetensors", spell, PEFT_ENTRIES, alpha=None)
        assert_deltas(loaded_deltas(model(name), tmp_path / f"{label}.safetensors"), want)


@pytest.mark.parametrize("entries", [PEFT_ENTRIES, ("lora_down.weight", "lora_up.weight")], ids=["peft", "kohya"])
def test_bare_diffusers_names_read_as_the_denoisers_layers(entries, tmp_path):
    """Qwen-Image-Lightning's files: `transformer_blocks.0.attn.to_q.lora_down.weight` and `.alpha`, no prefix."""
    want = named_file("qwen", tmp_path / "bare.safetensors", lambda p: p, entries)
    assert_deltas(loaded_deltas(model("qwen"), tmp_path / "bare.safetensors"), want)


def test_a_diffusion_model_file_continues_as_base_lora(tmp_path):
    want = named_file("qwen", tmp_path / "qwen.safetensors", COMFY[1], PEFT_ENTRIES, None)
    m = model("qwen")
    setup(m, tmp_path / "qwen.safetensors")
    key = "transformer.transformer_blocks.0.attn.to_q"
    torch.testing.assert_close(applied(m, *key.split(".", 1)), want[key], rtol=1e-5, atol=1e-6)


def test_whole_weight_differences_are_refused_by_name(tmp_path):
    named_file("sdxl", tmp_path / "comfy.safetensors", COMFY[1])
    from safetensors.torch import load_file

    tensors = load_file(str(tmp_path / "comfy.safetensors"))
    tensors["diffusion_model.middle_block.1.proj_in.diff_b"] = torch.zeros(32)
    save_file(tensors, str(tmp_path / "comfy.safetensors"))
    with pytest.raises(ValueError, match=r"comfy.safetensors: 1 entries are whole weight differences "
                                         r"\(diffusion_model.middle_block.1.proj_in.diff_b; ComfyUI's `.diff` / `.diff_b`\)"):
        setup(model("sdxl"), tmp_path / "comfy.safetensors")


def peft_file(name: str, path, metadata: dict, fold: float = 1.0, rank: int = 4):
    """diffusers/PEFT keys (`transformer.<path>.lora_A.weight`) on NAMED[name]'s layers, `fold` in lora_B;
    and each module's delta at scale 1 (alpha = rank)."""
    m = model(name)
    modules = dict(getattr(m, m.denoiser).named_modules())
    tensors, want = {}, {}
    for module_path in NAMED[name].values():
        linear = modules[module_path]
        down, up = rand(rank, linear.in_features), rand(linear.out_features, rank) * fold
        tensors[f"transformer.{module_path}.lora_A.weight"], tensors[f"transformer.{module_path}.lora_B.weight"] = down, up
        want[f"transformer.{module_path}"] = up @ down
    save_file(tensors, str(path), metadata=metadata)
    return want


KOHYA_HEADER = {"ss_network_dim": "4", "ss_network_alpha": "2.0", "ss_network_module": "networks.lora_flux"}


@pytest.mark.parametrize(("metadata", "scale"), [
    (KOHYA_HEADER, 1.0),  # sd-scripts convert_flux_lora.py / musubi convert_lora.py: folded, the source's header kept
    ({}, 1.0),
    ({**KOHYA_HEADER, "lora_adapter_metadata": '{"transformer.r": 4, "transformer.lora_alpha": 8}'}, 2.0),  # diffusers' own
], ids=["kohya-header", "no-header", "adapter-metadata"])
def test_a_peft_file_reads_alpha_as_diffusers_does(metadata, scale, tmp_path):
    want = peft_file("qwen", tmp_path / "p.safetensors", metadata)
    assert_deltas(loaded_deltas(model("qwen"), tmp_path / "p.safetensors"), {k: v * scale for k, v in want.items()})


def forward_delta(m, key: str) -> torch.Tensor:
    """The delta the set-up model's adapter at `part.path` adds to its layer's weight (a forward on the identity)."""
    part, path = key.split(".", 1)
    layer = getattr(m, part).get_submodule(path).eval()
    x = torch.eye(layer.base_layer.in_features)
    with torch.no_grad():
        return (layer(x) - layer.base_layer(x)).T


def lycoris_layer(kind: str, out: int, inp: int, rank: int = 2) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """One LoHa or LoKr (w1 whole, w2 of rank `rank`) layer's entries and its delta before alpha / rank."""
    if kind == "loha":
        t = {"hada_w1_a": rand(out, rank), "hada_w1_b": rand(rank, inp), "hada_w2_a": rand(out, rank), "hada_w2_b": rand(rank, inp)}
        return t, (t["hada_w1_a"] @ t["hada_w1_b"]) * (t["hada_w2_a"] @ t["hada_w2_b"])
    t = {"lokr_w1": rand(2, 2), "lokr_w2_a": rand(out // 2, rank), "lokr_w2_b": rand(rank, inp // 2)}
    return t, torch.kron(t["lokr_w1"], t["lokr_w2_a"] @ t["lokr_w2_b"])


def lycoris_file(kind: str, path, spell=lambda p: "transformer." + p) -> dict[str, torch.Tensor]:
    """`transformer.<path>.hada_*` / `.lokr_*` and each layer's own `.alpha` on NAMED["qwen"]'s layers; the deltas."""
    modules = dict(model("qwen").transformer.named_modules())
    tensors, want = {}, {}
    for i, module_path in enumerate(NAMED["qwen"].values()):
        linear = modules[module_path]
        entries, delta = lycoris_layer(kind, linear.out_features, linear.in_features)
        alpha = 1.0 + i  # per layer
        tensors.update({f"{spell(module_path)}.{k}": v for k, v in entries.items()})
        tensors[f"{spell(module_path)}.alpha"] = torch.tensor(alpha)
        want[f"transformer.{module_path}"] = delta * (alpha / 2)
    save_file(tensors, str(path))
    return want


LYCORIS_NAMES = {
    "peft-keys": lambda p: "transformer." + p,  # ai-toolkit's LoKr, OneTrainer's DIFFUSERS_LORA LoHa / LoKr
    "lycoris": lambda p: "lycoris_" + p.replace(".", "_"),  # SimpleTuner's LyCORIS files (LyCORIS's own names)
}


@pytest.mark.parametrize("kind", ["loha", "lokr"])
@pytest.mark.parametrize("names", list(LYCORIS_NAMES))
def test_a_lycoris_file_reads_each_layers_alpha(kind, names, tmp_path):
    """`transformer.<path>.lokr_w1` / `lycoris_<path>.lokr_w1` ... and the layer's `.alpha`."""
    want = lycoris_file(kind, tmp_path / "lyco.safetensors", LYCORIS_NAMES[names])
    m = model("qwen")
    got = load_lora_file(tmp_path / "lyco.safetensors", m.lora_module_names(), m.denoiser)
    sd, scale = got.parts["transformer"], got.alpha / got.rank
    for key, w in want.items():
        t = {k.removeprefix(key.removeprefix("transformer.") + "."): v for k, v in sd.items() if k.startswith(key.removeprefix("transformer.") + ".")}
        if kind == "loha":
            delta = (t["hada_w1_a"] @ t["hada_w1_b"]) * (t["hada_w2_a"] @ t["hada_w2_b"])
        else:
            delta = torch.kron(t["lokr_w1"], t["lokr_w2_a"] @ t["lokr_w2_b"])
        torch.testing.assert_close(delta * scale, w, rtol=1e-5, atol=1e-6)


def test_a_peft_key_loha_file_continues_as_base_lora(tmp_path):
    want = lycoris_file("loha", tmp_path / "loha.safetensors")
    m = model("qwen")
    setup(m, tmp_path / "loha.safetensors", peft_type="LOHA")
    for key, w in want.items():
        torch.testing.assert_close(forward_delta(m, key), w, rtol=1e-4, atol=1e-5)


def test_flux_t5_as_sd_scripts_lora_te3_trains_the_t5(tmp_path):
    """sd-scripts names Flux.1's T5 `lora_te3_` (ComfyUI reads lora_te2_ and lora_te3_ as its T5); it was dropped without a word."""
    m = model("flux")
    t5 = m.text_encoder_2.get_submodule("encoder.block.0.layer.0.SelfAttention.q")
    down, up = rand(4, t5.in_features), rand(t5.out_features, 4)
    name = "lora_te3_encoder_block_0_layer_0_SelfAttention_q"
    save_file({f"{name}.lora_down.weight": down, f"{name}.lora_up.weight": up, f"{name}.alpha": torch.tensor(2.0)},
              str(tmp_path / "t5.safetensors"))
    setup(m, tmp_path / "t5.safetensors")
    torch.testing.assert_close(forward_delta(m, "text_encoder_2.encoder.block.0.layer.0.SelfAttention.q"), up @ down / 2,
                               rtol=1e-4, atol=1e-5)


def test_a_part_the_model_does_not_have_is_refused_by_name(tmp_path):
    named_file("qwen", tmp_path / "two.safetensors", KOHYA_UNET[1])
    from safetensors.torch import load_file

    tensors = load_file(str(tmp_path / "two.safetensors"))
    tensors.update({"lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_down.weight": torch.zeros(4, 8),
                    "lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_up.weight": torch.zeros(8, 4)})
    save_file(tensors, str(tmp_path / "two.safetensors"))
    with pytest.raises(ValueError, match=r"^lora_model_name: .*two.safetensors: 1 text encoder 2 layer\(s\) \(e.g. "
                                         r"encoder.layers.0.mlp.fc1\), a part this QWEN model does not have \(it has transformer, text encoder\)"):
        setup(model("qwen"), tmp_path / "two.safetensors")


def _bad_files(path) -> dict[str, tuple[dict, dict]]:
    q = "lora_unet_transformer_blocks_0_attn_to_q"
    k = "lora_unet_transformer_blocks_0_attn_to_k"
    size = model("qwen").transformer.get_submodule("transformer_blocks.0.attn.to_q").in_features
    return {
        # OFT blocks of 4 and of 8 (LoKr layers of different ranks continue, test_lora_mixed_ranks.py)
        "oft-sizes": ({f"{q}.oft_R.weight": rand(size // 4, 6), f"{k}.oft_R.weight": rand(size // 8, 28)}, {"peft_type": "OFT_2"}),
        "layout": ({"model.diffusion_model.out.weight": rand(4, 4)}, {}),
        "shape": ({f"{q}.lora_down.weight": rand(4, size + 1), f"{q}.lora_up.weight": rand(size, 4)}, {}),
        "peft_type": ({f"{q}.lora_down.weight": rand(4, size), f"{q}.lora_up.weight": rand(size, 4)}, {"peft_type": "LOHA"}),
    }


@pytest.mark.parametrize("case", ["oft-sizes", "layout", "shape", "peft_type"])
def test_every_refusal_names_the_field_and_the_file(case, tmp_path):
    tensors, options = _bad_files(tmp_path)[case]
    save_file(tensors, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ValueError, match=rf"^lora_model_name: {tmp_path}/bad.safetensors: \w"):
        setup(model("qwen"), tmp_path / "bad.safetensors", **options)


@pytest.mark.parametrize("entries", ["kohya", "peft"])
def test_layers_of_different_ranks_are_padded_to_the_largest_exactly(entries, tmp_path):
    """sd-scripts' conv_dim / LoCon, peft's rank_pattern (SimpleTuner): each layer's delta as the file means it."""
    m = model("qwen")
    modules = dict(m.transformer.named_modules())
    tensors, want = {}, {}
    for (module_path, rank, alpha) in zip(NAMED["qwen"].values(), (4, 2, 8), (2.0, 1.0, None), strict=True):
        linear = modules[module_path]
        down, up = rand(rank, linear.in_features), rand(linear.out_features, rank)
        if entries == "kohya":
            name = "lora_unet_" + module_path.replace(".", "_")
            tensors.update({f"{name}.lora_down.weight": down, f"{name}.lora_up.weight": up})
            tensors.update({f"{name}.alpha": torch.tensor(alpha)} if alpha is not None else {})
            want[f"transformer.{module_path}"] = up @ down * ((alpha or rank) / rank)
        else:  # diffusers/PEFT keys: alpha = rank
            tensors.update({f"transformer.{module_path}.lora_A.weight": down, f"transformer.{module_path}.lora_B.weight": up})
            want[f"transformer.{module_path}"] = up @ down
    save_file(tensors, str(tmp_path / "ranks.safetensors"))
    assert_deltas(loaded_deltas(m, tmp_path / "ranks.safetensors"), want)
    setup(m, tmp_path / "ranks.safetensors")
    for key, w in want.items():
        torch.testing.assert_close(forward_delta(m, key), w, rtol=1e-4, atol=1e-5)


def test_loha_layers_of_different_ranks_are_padded_to_the_largest_exactly(tmp_path):
    """LyCORIS' LoHa with conv_dim != dim: each layer's delta as the file means it (refused before)."""
    m = model("qwen")
    modules = dict(m.transformer.named_modules())
    tensors, want = {}, {}
    for module_path, rank, alpha in zip(NAMED["qwen"].values(), (4, 2, 8), (2.0, 1.0, 8.0), strict=True):
        linear = modules[module_path]
        entries, delta = lycoris_layer("loha", linear.out_features, linear.in_features, rank=rank)
        name = "lora_unet_" + module_path.replace(".", "_")
        tensors.update({f"{name}.{k}": v for k, v in entries.items()} | {f"{name}.alpha": torch.tensor(alpha)})
        want[f"transformer.{module_path}"] = delta * (alpha / rank)
    save_file(tensors, str(tmp_path / "loha.safetensors"))
    setup(m, tmp_path / "loha.safetensors", peft_type="LOHA")
    for key, w in want.items():
        torch.testing.assert_close(forward_delta(m, key), w, rtol=1e-4, atol=1e-5)


def test_a_whole_matrix_lokr_file_continues_with_the_default_switches(tmp_path):
    """LyCORIS's full_matrix LoKr (lokr_w1 and lokr_w2 whole, applied at scale 1 whatever its alpha) needs no
    lokr_full_matrix switched on: the file's factors say it (the weights did not fit before)."""
    from peft.tuners.lokr.layer import factorization

    m = model("qwen")
    modules = dict(m.transformer.named_modules())
    tensors, want = {}, {}
    for module_path in NAMED["qwen"].values():
        linear = modules[module_path]
        (a, b), (c, d) = factorization(linear.out_features), factorization(linear.in_features)
        w1, w2 = rand(a, c), rand(b, d)
        name = "lora_unet_" + module_path.replace(".", "_")
        tensors.update({f"{name}.lokr_w1": w1, f"{name}.lokr_w2": w2, f"{name}.alpha": torch.tensor(4.0)})
        want[f"transformer.{module_path}"] = torch.kron(w1, w2)
    save_file(tensors, str(tmp_path / "full.safetensors"))
    setup(m, tmp_path / "full.safetensors", peft_type="LOKR")
    for key, w in want.items():
        torch.testing.assert_close(forward_delta(m, key), w, rtol=1e-4, atol=1e-5)


def test_the_sample_tool_reads_a_kohya_flux_file_as_base_lora_does(tmp_path):
    """Tools → Sample puts the same file on the model: every original layer's parts matched."""
    from ot_gradio.tools.sample import apply_lora

    want = bfl_file("flux", tmp_path / "bfl.safetensors", KOHYA_UNET[1])
    matched, skipped = apply_lora(model("flux"), str(tmp_path / "bfl.safetensors"), 1.0)
    assert (matched, skipped) == (len(want), 0)
