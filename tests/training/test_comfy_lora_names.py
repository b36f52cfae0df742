"""KOHYA_LORA / COMFY_LORA files name every trained layer as ComfyUI's key map does (the map's
rules in tests/comfy_reference.py, read from ComfyUI's source and checked against its code by
scripts/check_comfyui_lora.py), for every family ComfyUI loads; and read back exactly."""

from __future__ import annotations

import pytest
import torch

from tests import comfy_reference as ref

FAMILIES = ("flux", "chroma", "flux2-dev", "flux2-klein", "z-image", "qwen-image", "pixart-sigma", "pixart-alpha", "wan", "hidream")
FAMILIES += ("anima",)  # transformer only (OneTrainer trains no Anima text encoder; a kohya one is refused)
FAMILIES += ("hunyuan-video",)  # q/k/v (and the single blocks' MLP input) one fused layer each; Llama and CLIP-L
FAMILIES += ("qwen-image-edit",)  # Qwen-Image's transformer and Qwen2.5-VL: ComfyUI reads it as a Qwen-Image model
FAMILIES += ("wan22-a14b",)  # its low-noise expert: ComfyUI loads each A14B expert as a Wan 2.1 t2v model (comfy/model_detection.py)
FAMILIES += ("wan22-i2v-a14b",)  # 36 channels in, no image embedding: the t2v blocks' names (comfy/model_detection.py)
FAMILIES += ("wan21-i2v",)  # ComfyUI's Wan 2.1 i2v model: the image keys and values of each block, the image projection


def _model(name: str):
    if name == "flux":
        from ot_gradio.models.flux import FluxDev1
        from ot_gradio.models.tiny.flux import tiny_flux_components

        return FluxDev1(tiny_flux_components())
    if name == "chroma":
        from ot_gradio.models.chroma import Chroma1
        from ot_gradio.models.tiny.chroma import tiny_chroma_components

        return Chroma1(tiny_chroma_components())
    if name.startswith("flux2"):
        from ot_gradio.models.flux2 import Flux2
        from ot_gradio.models.tiny.flux2 import tiny_flux2_components

        return Flux2(tiny_flux2_components(name.removeprefix("flux2-")))
    if name == "z-image":
        from ot_gradio.models.tiny.z_image import tiny_z_image_components
        from ot_gradio.models.z_image import ZImage

        return ZImage(tiny_z_image_components())
    if name == "hidream":
        from ot_gradio.models.hidream import HiDream
        from ot_gradio.models.tiny.hidream import tiny_hidream_components

        return HiDream(tiny_hidream_components())
    if name == "qwen-image":
        from ot_gradio.models.qwen_image import QwenImage
        from ot_gradio.models.tiny.qwen_image import tiny_qwen_image_components

        return QwenImage(tiny_qwen_image_components())
    if name == "qwen-image-edit":
        from ot_gradio.models.qwen_image_edit import QwenImageEdit
        from ot_gradio.models.tiny.qwen_image import tiny_qwen_image_components

        return QwenImageEdit(tiny_qwen_image_components())
    if name == "anima":
        from ot_gradio.models.anima import Anima
        from ot_gradio.models.tiny.anima import tiny_anima_components

        return Anima(tiny_anima_components())
    if name == "ideogram4":
        from ot_gradio.models.ideogram4 import Ideogram4
        from ot_gradio.models.tiny.ideogram4 import tiny_ideogram4_components

        return Ideogram4(tiny_ideogram4_components())
    if name == "hunyuan-video":
        from ot_gradio.models.hunyuan_video import HunyuanVideo
        from ot_gradio.models.tiny.hunyuan_video import tiny_hunyuan_video_components

        return HunyuanVideo(tiny_hunyuan_video_components())
    if name == "wan":
        from ot_gradio.models.tiny.wan import tiny_wan_components
        from ot_gradio.models.wan import Wan21

        return Wan21(tiny_wan_components())
    if name == "wan22-a14b":
        from ot_gradio.models.tiny.wan import tiny_wan_components, tiny_wan_transformer
        from ot_gradio.models.wan import Wan22T2VA14B

        model = Wan22T2VA14B({**tiny_wan_components(), "transformer_2": tiny_wan_transformer(1)})
        model.choose_expert("LOW_NOISE")
        return model
    if name == "wan22-i2v-a14b":
        from ot_gradio.models.tiny.wan import tiny_wan_i2v_components
        from ot_gradio.models.wan_i2v import Wan22I2VA14B

        return Wan22I2VA14B(tiny_wan_i2v_components())
    if name == "wan21-i2v":
        from ot_gradio.models.tiny.wan import tiny_wan21_i2v_components
        from ot_gradio.models.wan21_i2v import Wan21I2V

        return Wan21I2V(tiny_wan21_i2v_components())
    from ot_gradio.models.pixart import PixArtAlpha
    from ot_gradio.models.pixart_sigma import PixArtSigma
    from ot_gradio.models.tiny.pixart import tiny_pixart_components
    from ot_gradio.models.tiny.pixart_sigma import tiny_pixart_sigma_components

    if name == "pixart-sigma":
        return PixArtSigma(**tiny_pixart_sigma_components())
    return PixArtAlpha(**tiny_pixart_components())


def comfy_names(name: str, model) -> set[str]:
    """Every LoRA layer name ComfyUI's map holds for this model (tests/comfy_reference.py)."""
    tr = model.transformer.config
    if name in ("flux", "chroma") or name.startswith("flux2"):
        flux2, chroma = name.startswith("flux2"), name == "chroma"
        guidance = bool(getattr(tr, "guidance_embeds", False))
        original = ref.flux_original(tr.num_layers, tr.num_single_layers, guidance=guidance, flux2=flux2, chroma=chroma)
        if chroma:
            original += ref.chroma_approximator(tr.approximator_layers)
        names = ref.generic_unet(original) | ref.flux_map(tr.num_layers, tr.num_single_layers)
        if name == "flux":
            clip_layers = model.text_encoder.config.num_hidden_layers
            names |= ref.clip_l_map(clip_layers)
            names |= ref.t5_map(model.text_encoder_2.config.num_layers, clip_l=True)
        elif chroma:
            names |= ref.t5_map(model.text_encoder.config.num_layers, clip_l=False)
        return names
    if name == "z-image":
        return ref.z_image_map(tr.n_layers, tr.n_refiner_layers) | ref.llm_map("qwen3_4b", model.text_encoder.config.num_hidden_layers)
    if name in ("qwen-image", "qwen-image-edit"):
        from ot_gradio.models.common import language_model_config
        from ot_gradio.models.key_layout import layer_paths

        original = layer_paths(model.transformer)  # ComfyUI's Qwen-Image model has diffusers' names
        return ref.generic_unet(original) | ref.llm_map("qwen25_7b", language_model_config(model.text_encoder).num_hidden_layers)
    if name == "hidream":
        from ot_gradio.models.key_layout import layer_paths

        return ref.hidream_map(layer_paths(model.transformer))  # ComfyUI's HiDream model has diffusers' names
    if name == "anima":
        return ref.anima_map(model.transformer)
    if name == "hunyuan-video":
        return (ref.hunyuan_video_map(tr.num_layers, tr.num_single_layers, tr.num_refiner_layers, bool(tr.guidance_embeds))
                | ref.llm_map("llama", model.text_encoder.config.num_hidden_layers)
                | ref.clip_l_generic("clip_l", model.text_encoder_2.config.num_hidden_layers))
    if name in ("wan", "wan22-a14b", "wan22-i2v-a14b", "wan21-i2v"):
        return ref.wan_map(tr.num_layers, model.text_encoder.config.num_layers, i2v=name == "wan21-i2v")
    micro = bool(tr.use_additional_conditions) if tr.use_additional_conditions is not None else tr.sample_size == 128
    return ref.pixart_map(tr.num_layers, micro) | ref.t5_map(model.text_encoder.config.num_layers, clip_l=False)


def _train_full(model, preset: str = "full", layer_filter: str = "") -> dict:
    """LoRA on the layers `preset` (custom: `layer_filter`, the transformer's only) selects, random weights."""
    from ot_gradio.training.lora import add_lora

    parts = {model.denoiser: "unet"}
    if not type(model).__name__.startswith(("Flux2", "HiDream", "Anima", "Ideogram")):  # these: the transformer only
        parts.update({te: "text_encoder" for te in model.text_encoder_names})
    presets = model.lora_layer_presets
    gen = torch.Generator().manual_seed(0)
    for part, kind in parts.items():
        custom = kind == "unet" or preset != "custom"
        add_lora(getattr(model, part), kind=kind, rank=2, alpha=1.0, dropout=0.0, layer_preset=preset if custom else "full",
                 layer_filter=layer_filter if kind == "unet" else "", presets=presets.get(part))
        for p in getattr(model, part).parameters():
            if p.requires_grad:
                p.data = torch.randn(p.shape, generator=gen)
    return {part: getattr(model, part) for part in parts}


# a layer filter that trains part of a fused weight (the single blocks' linear1 without its MLP input):
# written as the fused layer with zero blocks, read back as the layers trained
PARTIAL_FUSED = [("hunyuan-video", "attn-only", "")]


@pytest.mark.parametrize(("name", "preset"), [(f, "full") for f in FAMILIES] + [p[:2] for p in PARTIAL_FUSED],
                         ids=list(FAMILIES) + [f"{p[0]}-{p[1]}" for p in PARTIAL_FUSED])
def test_every_kohya_layer_name_is_one_comfyui_maps_and_reads_back(name, preset, tmp_path):
    from safetensors import safe_open

    from ot_gradio.training.lora import lora_state_dict
    from ot_gradio.training.lora_format import KOHYA, load_lora_file, save_lora

    model = _model(name)
    parts = _train_full(model, preset)
    names = model.lora_module_names()
    path = save_lora(tmp_path / "k.safetensors", parts, base_model_version=model.lora_base_model_version, lora_format=KOHYA,
                     module_names=names)
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
    layers = {k.rsplit(".", 2)[0] if k.endswith(".weight") else k.rsplit(".", 1)[0] for k in keys}
    trained = {(part, k.rsplit(".lora_", 1)[0]) for part, m in parts.items() for k in lora_state_dict(m)}
    assert len(layers) == len({names.get(part, {}).get(path, (part, path)) for part, path in trained})  # fused layers are one
    dropped = sorted(layers - comfy_names(name, model))
    assert not dropped, f"{len(dropped)} of {len(layers)} layers ComfyUI would skip: {dropped[:4]}"

    loaded = load_lora_file(path, module_names=names, denoiser=model.denoiser)
    for part, module in parts.items():  # every name maps back to its module path and weights
        expected = lora_state_dict(module)
        assert loaded.parts[part].keys() == expected.keys()
        assert all(torch.equal(loaded.parts[part][k], expected[k]) for k in expected)


# family, transformer layer filter, trained text encoders: the KOHYA files diffusers' own
# load_lora_weights reads (Flux.1 / Chroma only attention layers: its converter has no place for
# the other ones; Z-Image and Qwen-Image every transformer layer)
DIFFUSERS_READS = [("z-image", "full", ()), ("qwen-image", "full", ()), ("flux", "attn-only", ("text_encoder",)),
                   ("chroma", "attn-only", ())]
# Ideogram 4 (ComfyUI has none): diffusers' converter reads OneTrainer's names, the fused qkv split, in the
# blocks only (OneTrainer's attn-mlp and blocks presets)
DIFFUSERS_READS += [("ideogram4", "attn-mlp", ()), ("ideogram4", "blocks", ())]
# Wan 2.1 I2V: diffusers' Wan converter reads the original names, the image keys and values among them
DIFFUSERS_READS += [("wan21-i2v", "attn-mlp", ())]


@pytest.mark.parametrize(("name", "preset", "text_encoders"), DIFFUSERS_READS)
def test_diffusers_loads_every_layer_of_our_kohya_file_as_merged(name, preset, text_encoders, tmp_path):
    from ot_gradio.models.common import base_module
    from ot_gradio.tools.convert import merge_into
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_format import KOHYA, load_lora_file, save_lora

    torch.manual_seed(0)
    model = _model(name)
    parts = {"transformer": preset, **{te: "full" for te in text_encoders}}
    gen = torch.Generator().manual_seed(1)
    for part, layers in parts.items():
        add_lora(getattr(model, part), kind="unet" if part == "transformer" else "text_encoder", rank=2, alpha=1.0, dropout=0.0,
                 layer_preset=layers, presets=model.lora_layer_presets.get(part))
        for p in getattr(model, part).parameters():
            if p.requires_grad:
                p.data = torch.randn(p.shape, generator=gen) * 0.05
    path = save_lora(tmp_path / "k.safetensors", {p: getattr(model, p) for p in parts}, base_model_version=model.lora_base_model_version,
                     lora_format=KOHYA, module_names=model.lora_module_names())
    torch.manual_seed(0)
    ours = _model(name)
    loaded = load_lora_file(path, module_names=ours.lora_module_names(), denoiser=ours.denoiser)
    merge_into(ours, loaded.parts, loaded.rank, loaded.alpha, 1.0)

    torch.manual_seed(0)
    pipe = _model(name).pipeline()
    pipe.load_lora_weights(str(path))
    for part in parts:
        adapters = sum(1 for m in getattr(pipe, part).modules() if getattr(m, "lora_A", None))
        assert adapters == len(loaded.parts[part]) // 2, part  # every layer of the file, none ignored
    pipe.fuse_lora(components=list(parts))
    for part in parts:
        theirs = {k.replace(".base_layer", ""): v for k, v in getattr(pipe, part).state_dict().items() if ".lora_" not in k}
        for key, value in base_module(getattr(ours, part)).state_dict().items():
            torch.testing.assert_close(theirs[key], value, rtol=0, atol=1e-6, msg=f"{part}.{key}")


def test_files_written_with_the_earlier_names_still_read_back(tmp_path):
    """Z-Image transformers of earlier files (`lora_transformer_` + the diffusers path) load as before."""
    from ot_gradio.training.lora import lora_state_dict
    from ot_gradio.training.lora_format import KOHYA, load_lora_file, save_lora

    model = _model("z-image")
    parts = {"transformer": _train_full(model)["transformer"]}
    path = save_lora(tmp_path / "old.safetensors", parts, base_model_version="z_image", lora_format=KOHYA,
                     module_names={"transformer": {k: k for k in model.lora_module_names()["transformer"]}})
    loaded = load_lora_file(path, module_names=model.lora_module_names(), denoiser=model.denoiser)
    for part, module in parts.items():
        assert loaded.parts[part].keys() == lora_state_dict(module).keys()


def test_comfyui_maps_every_layer_of_a_hidream_diffusers_lora(tmp_path):
    """HiDream's DIFFUSERS_LORA (what HiDreamImagePipeline loads) is also SimpleTuner's layout,
    `transformer.<layer>`, which ComfyUI maps for HiDream: the one file serves both."""
    from safetensors import safe_open

    from ot_gradio.training.lora_format import DIFFUSERS, save_lora

    model = _model("hidream")
    parts = _train_full(model)
    path = save_lora(tmp_path / "d.safetensors", parts, base_model_version=model.lora_base_model_version, lora_format=DIFFUSERS)
    with safe_open(str(path), "pt") as f:
        layers = {k.split(".lora_")[0] for k in f.keys()}
    assert layers and not sorted(layers - comfy_names("hidream", model))


def _ideogram4_rows(num_layers: int) -> dict[str, tuple[list[str], bool]]:
    """Ideogram 4's fused weights: each block's `attention.qkv` stacks q, k and v (OneTrainer's IdeogramModel)."""
    return {f"layers.{i}.attention.qkv": ([f"layers.{i}.attention.{n}" for n in ("to_q", "to_k", "to_v")], False)
            for i in range(num_layers)}


# family, preset, custom layer filter: full, and layer filters that train part of fused weights
APPLIED = [("hunyuan-video", "full", ""), ("hunyuan-video", "attn-only", ""), ("ideogram4", "custom", "attention.to_q,attention.to_k")]


@pytest.mark.parametrize(("name", "preset", "layer_filter"), APPLIED, ids=[f"{a}-{b}" for a, b, _ in APPLIED])
def test_a_fused_comfy_file_applied_as_comfyui_does_is_the_diffusers_file(name, preset, layer_filter, tmp_path):
    """Each layer of our COMFY_LORA file, applied to its original weight as ComfyUI's calculate_weight
    does (up @ down * alpha / rank), is exactly the DIFFUSERS_LORA file's deltas stacked into that
    weight as diffusers' converter splits it (fused q/k/v and the wider MLP input; the final
    modulation's halves swapped), zero rows for a layer the filter left out; every original weight
    with a trained layer is patched, none dropped, and the file reads back as the trained layers."""
    from safetensors.torch import load_file

    from ot_gradio.training.lora import lora_state_dict
    from ot_gradio.training.lora_format import DIFFUSERS, KOHYA, load_lora_file, save_lora

    model = _model(name)
    parts = _train_full(model, preset, layer_filter)
    path = save_lora(tmp_path / "c.safetensors", parts, base_model_version=model.lora_base_model_version,
                     lora_format=KOHYA, module_names=model.lora_module_names())
    comfy = load_file(str(path))
    peft = load_file(str(save_lora(tmp_path / "d.safetensors", parts, lora_format=DIFFUSERS)))  # alpha / rank folded into lora_B
    theirs = {}
    for key in {k.rsplit(".", 2)[0] for k in comfy if k.endswith(".lora_down.weight") and k.startswith("diffusion_model.")}:
        down, up = comfy[f"{key}.lora_down.weight"], comfy[f"{key}.lora_up.weight"]
        theirs[key.removeprefix("diffusion_model.")] = up @ down * (comfy[f"{key}.alpha"].item() / down.shape[0])
    tr = model.transformer.config
    if name == "hunyuan-video":
        rows = ref.hunyuan_video_rows(tr.num_layers, tr.num_single_layers, tr.num_refiner_layers)
        assert set(ref.hunyuan_video_original(tr.num_layers, tr.num_single_layers, tr.num_refiner_layers, True)) == rows.keys()
    else:
        rows = _ideogram4_rows(tr.num_layers)
    trained = {k.rsplit(".lora_", 1)[0].removeprefix("transformer.") for k in peft if k.startswith("transformer.")}
    assert theirs.keys() == {key for key, (layers, _) in rows.items() if trained & set(layers)}
    assert preset == "full" or any(not set(rows[key][0]) <= trained for key in theirs)  # some fused weight trained in part
    for key in theirs:
        layers, swap = rows[key]
        deltas = [peft[f"transformer.{p}.lora_B.weight"] @ peft[f"transformer.{p}.lora_A.weight"] if p in trained
                  else torch.zeros(model.transformer.get_submodule(p).weight.shape) for p in layers]
        expected = torch.cat(deltas)
        if swap:
            expected = torch.cat(expected.chunk(2)[::-1])
        torch.testing.assert_close(theirs[key], expected, rtol=1e-5, atol=1e-5, msg=key)
    loaded = load_lora_file(path, module_names=model.lora_module_names(), denoiser=model.denoiser)
    for part, module in parts.items():
        expected = lora_state_dict(module)
        assert loaded.parts[part].keys() == expected.keys()
        assert all(torch.equal(loaded.parts[part][k], expected[k]) for k in expected)


def _onetrainer_hunyuan_names(double: int, single: int, refiner: int) -> dict[str, str]:
    """ComfyUI's HunyuanVideo keys -> OneTrainer's (HunyuanVideoModel.diffusers_to_original, fusion_groups)."""
    out = {"txt_in.input_embedder": "txt_in.input_embedder", "final_layer.linear": "final_layer.linear",
           "final_layer.adaLN_modulation.1": "final_layer.adaLN_modulation.1", "vector_in.in_layer": "vector_in.in_layer",
           "vector_in.out_layer": "vector_in.out_layer", "time_in.in_layer": "time_in.mlp.0", "time_in.out_layer": "time_in.mlp.2",
           "guidance_in.in_layer": "guidance_in.mlp.0", "guidance_in.out_layer": "guidance_in.mlp.2",
           "txt_in.t_embedder.in_layer": "txt_in.t_embedder.mlp.0", "txt_in.t_embedder.out_layer": "txt_in.t_embedder.mlp.2",
           "txt_in.c_embedder.in_layer": "txt_in.c_embedder.linear_1", "txt_in.c_embedder.out_layer": "txt_in.c_embedder.linear_2"}
    for i in range(refiner):
        b = f"txt_in.individual_token_refiner.blocks.{i}"
        out |= {f"{b}.{a}": f"{b}.{o}" for a, o in (("self_attn.qkv", "self_attn_qkv"), ("self_attn.proj", "self_attn_proj"),
                                                    ("mlp.0", "mlp.fc1"), ("mlp.2", "mlp.fc2"), ("adaLN_modulation.1", "adaLN_modulation.1"))}
    for i in range(double):
        b = f"double_blocks.{i}"
        for s in ("img", "txt"):
            out |= {f"{b}.{s}_{a}": f"{b}.{s}_{o}" for a, o in (("attn.qkv", "attn_qkv"), ("attn.proj", "attn_proj"), ("mlp.0", "mlp.fc1"),
                                                                ("mlp.2", "mlp.fc2"), ("mod.lin", "mod.linear"))}
    for i in range(single):
        b = f"single_blocks.{i}"
        out |= {f"{b}.linear1": f"{b}.linear1", f"{b}.linear2": f"{b}.linear2", f"{b}.modulation.lin": f"{b}.modulation.linear"}
    return out


@pytest.mark.parametrize("entries", ["peft", "kohya"])
def test_a_hunyuan_video_lora_in_onetrainers_names_reads_back(entries, tmp_path):
    """OneTrainer's COMFY_LORA (`diffusion_model.double_blocks.0.img_attn_qkv.lora_A.weight`) and KOHYA_LORA
    (`lora_unet_double_blocks_0_img_mlp_fc1.lora_down.weight`) spellings of our file read back to the same layers."""
    from safetensors.torch import load_file, save_file

    from ot_gradio.training.lora import lora_state_dict
    from ot_gradio.training.lora_format import KOHYA, load_lora_file, save_lora

    model = _model("hunyuan-video")
    parts = {"transformer": _train_full(model)["transformer"]}
    ours = load_file(str(save_lora(tmp_path / "c.safetensors", parts, base_model_version=model.lora_base_model_version,
                                   lora_format=KOHYA, module_names=model.lora_module_names())))
    tr = model.transformer.config
    names = _onetrainer_hunyuan_names(tr.num_layers, tr.num_single_layers, tr.num_refiner_layers)
    theirs = {}
    for key, value in ours.items():
        layer, _, entry = key.removeprefix("diffusion_model.").rpartition(".lora_") if ".lora_" in key else (
            key.removeprefix("diffusion_model.").removesuffix(".alpha"), "", "alpha")
        name = names[layer]
        if entries == "peft":
            entry = {"down.weight": "lora_A.weight", "up.weight": "lora_B.weight"}.get(entry, entry)
            theirs[f"diffusion_model.{name}.{entry}"] = value
        else:
            theirs[f"lora_unet_{name.replace('.', '_')}.{entry if entry == 'alpha' else 'lora_' + entry}"] = value
    save_file(theirs, str(tmp_path / "ot.safetensors"))
    loaded = load_lora_file(tmp_path / "ot.safetensors", module_names=model.lora_module_names(), denoiser=model.denoiser)
    expected = lora_state_dict(parts["transformer"])
    assert loaded.parts["transformer"].keys() == expected.keys()
    assert all(torch.equal(loaded.parts["transformer"][k], expected[k]) for k in expected)
