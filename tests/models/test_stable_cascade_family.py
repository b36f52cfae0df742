"""Stable Cascade: loading (lite subfolders, a stage C single file as prior.model_name), the
training math, sampling, the original single-file layout and the kohya LoRA names."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ot_gradio.models.common import ModelLoadError


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    from ot_gradio.models.tiny import resolve_tiny

    paths = resolve_tiny("tiny:cascade")
    root = paths.diffusers_dir.parent
    return {"prior": root / "prior", "decoder": root / "decoder", "effnet": root / "decoder" / "effnet_encoder.safetensors",
            "stage_c": paths.single_file}


@pytest.fixture(scope="module")
def model(tiny):
    from ot_gradio.models.stable_cascade import StableCascade

    return StableCascade.load("tiny:cascade", offline=True)


def test_registry_and_family_table_agree():
    from ot_gradio.config.enums import ModelType
    from ot_gradio.config.families import family_info, supports
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.stable_cascade import StableCascade

    assert get_family(ModelType.STABLE_CASCADE_1) is StableCascade
    assert StableCascade.part_names == family_info(ModelType.STABLE_CASCADE_1).parts
    assert supports(ModelType.STABLE_CASCADE_1, "LORA")


def test_lite_subfolders_and_the_effnet_beside_the_decoder(tiny, tmp_path):
    """`.../prior_lite` and `.../decoder_lite` name the component folder; a blank EffNet comes
    from effnet_encoder.safetensors at the top of the decoder model."""
    from ot_gradio.models.cascade_loading import resolve_source
    from ot_gradio.models.stable_cascade import StableCascade

    prior_root, decoder_root = tmp_path / "prior-model", tmp_path / "decoder-model"
    shutil.copytree(tiny["prior"], prior_root)
    shutil.move(prior_root / "prior", prior_root / "prior_lite")
    shutil.copytree(tiny["decoder"], decoder_root)
    shutil.move(decoder_root / "decoder", decoder_root / "decoder_lite")
    model = StableCascade.load(str(prior_root / "prior_lite"), offline=True, part_models={"decoder": str(decoder_root / "decoder_lite")})
    reference = load_file(str(tiny["effnet"]))
    assert torch.equal(model.effnet_encoder.mapper[0].weight, reference["mapper.0.weight"])
    assert not model.effnet_encoder.config.affine_batch_norm  # Stable Cascade's file has no affine batch norm
    hub = resolve_source("stabilityai/stable-cascade-prior/prior_lite", "base_model_name", "prior", "x")
    assert (hub.root, hub.subfolder, hub.local) == ("stabilityai/stable-cascade-prior", "prior_lite", False)
    assert resolve_source("stabilityai/stable-cascade", "decoder.model_name", "decoder", "x").subfolder == "decoder"
    (decoder_root / "effnet_encoder.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="effnet_encoder.model_name"):
        StableCascade.load(str(prior_root / "prior_lite"), offline=True, part_models={"decoder": str(decoder_root / "decoder_lite")})


def test_training_math(model):
    from diffusers import DDPMWuerstchenScheduler

    pixels = torch.rand(2, 3, 64, 64) * 2 - 1
    latents = model.encode_images(pixels)
    assert latents.shape == (2, 16, 2, 2)
    r = model.noise_scheduler.ratio(torch.tensor([0, 500, 999]))
    assert torch.allclose(r, torch.tensor([0.001, 0.501, 1.0]))  # r = t + 0.001
    assert torch.allclose(model.noise_scheduler.alphas_cumprod[[0, 500, 999]], DDPMWuerstchenScheduler()._alpha_cumprod(r, "cpu"))
    noise, t = torch.randn_like(latents), torch.tensor([10, 990])
    assert torch.equal(model.prediction_target(latents, noise, t), noise)

    cond = model.encode_text(["a red circle", "a blue square"])
    tokens = model.tokenize(["a red circle", "a blue square"])
    with torch.no_grad():
        out = model.text_encoder(tokens.input_ids, attention_mask=tokens.attention_mask, output_hidden_states=True)
    assert torch.allclose(cond["clip_text"], out.hidden_states[-1])  # no final layer norm, as the prior pipeline
    assert torch.allclose(cond["clip_text_pooled"], out.text_embeds.unsqueeze(1))
    noisy = model.add_noise(latents, noise, t)
    with torch.no_grad():
        pred = model.predict(noisy, t, cond)
        direct = model.prior(sample=noisy, timestep_ratio=torch.tensor([0.011, 0.991]), clip_text_pooled=cond["clip_text_pooled"],
                             clip_text=cond["clip_text"], clip_img=torch.zeros(2, 1, 16)).sample
    assert pred.shape == latents.shape and torch.allclose(pred, direct, atol=1e-6)


def test_sample_has_the_asked_size(model):
    image = model.sample("a red circle", negative_prompt="blue", height=96, width=64, steps=2, cfg_scale=3.0, seed=1)
    assert image.size == (64, 96)


def test_a_sample_with_the_parts_in_the_types_a_gpu_loads_them_in(tiny):
    """Our preset and OneTrainer's load the prior and the text encoder in BFLOAT_16 and the decoder
    in FLOAT_32 (a CPU loads all in float32): the decoder pipeline hands the decoder the prompt's
    pooled bfloat16 embedding, outside autocast."""
    from ot_gradio.models.stable_cascade import StableCascade

    model = StableCascade.load("tiny:cascade", offline=True)
    model.prior.to(torch.bfloat16)
    model.text_encoder.to(torch.bfloat16)
    image = model.sample("a red circle", height=64, width=64, steps=2, cfg_scale=3.0, seed=1)
    assert image.size == (64, 64) and np.asarray(image).std() > 0
    pixels = model.decode_latents(torch.zeros(1, 16, 2, 2, dtype=torch.bfloat16), "a red circle", steps=1)
    assert pixels.shape[:2] == (1, 3) and torch.isfinite(pixels).all()


def test_single_file_is_the_original_stage_c_layout(model, tiny, tmp_path):
    """diffusers' own single-file loader reads it back, and so does prior.model_name."""
    from diffusers import StableCascadeUNet

    from ot_gradio.models.stable_cascade import StableCascade

    path = model.save_single_file(tmp_path / "out" / "stage_c.safetensors", "BFLOAT_16")
    keys = load_file(str(path))
    assert "down_blocks.0.2.attention.attn.in_proj_weight" in keys and "down_blocks.0.2.attention.attn.out_proj.bias" in keys
    assert not any(".to_q." in k or ".to_out." in k for k in keys)
    assert keys["clip_txt_mapper.weight"].dtype == torch.bfloat16
    assert (tmp_path / "out" / "stage_c.text_encoder.safetensors").is_file()
    reread = StableCascadeUNet.from_single_file(str(path), config=str(tiny["prior"]), subfolder="prior", torch_dtype=torch.float32)
    expected = {k: v.to(torch.bfloat16).float() for k, v in model.prior.state_dict().items()}
    assert all(torch.equal(v, expected[k]) for k, v in reread.state_dict().items())

    loaded = StableCascade.load(str(tiny["prior"]), offline=True,
                                part_models={"prior": str(path), "decoder": str(tiny["decoder"]), "effnet_encoder": str(tiny["effnet"])})
    assert torch.equal(loaded.prior.clip_txt_mapper.weight, expected["clip_txt_mapper.weight"])
    with pytest.raises(ModelLoadError, match="prior.model_name"):
        StableCascade._load_prior_file(tiny["effnet"], None)


def test_save_diffusers_reloads(model, tmp_path):
    from diffusers import StableCascadeUNet

    out = model.save_diffusers(tmp_path / "saved", None)
    prior = StableCascadeUNet.from_pretrained(str(out), subfolder="prior")
    assert all(torch.equal(v, model.prior.state_dict()[k]) for k, v in prior.state_dict().items())


def test_lora_presets_and_kohya_names_for_comfyui(model, tmp_path):
    from ot_gradio.models.stable_cascade import LORA_PRESETS
    from ot_gradio.training.lora import select_lora_targets
    from ot_gradio.training.lora_format import load_lora_file, save_lora_parts

    prior = model.prior
    layers = {n for n, m in prior.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and getattr(m, "groups", 1) == 1}
    full = set(select_lora_targets(prior, kind="unet", layer_preset="full", presets=LORA_PRESETS))
    assert full == layers - {"clip_img_mapper"}
    assert set(select_lora_targets(prior, kind="unet", layer_preset="attn-only", presets=LORA_PRESETS)) == {
        n for n in layers if ".attention." in n
    }

    names = model.lora_module_names()["prior"]
    assert names["down_blocks.0.2.attention.to_q"] == "down_blocks.0.2.attention.attn.to_q"
    assert names["down_blocks.0.2.attention.to_out.0"] == "down_blocks.0.2.attention.attn.out_proj"
    parts = {"prior": {}, "text_encoder": {}}
    for path in ("down_blocks.0.2.attention.to_q", "down_blocks.0.2.attention.to_out.0", "down_blocks.0.1.mapper_crp"):
        parts["prior"][f"{path}.lora_A.weight"] = torch.ones(4, 32)
        parts["prior"][f"{path}.lora_B.weight"] = torch.ones(32, 4)
    parts["text_encoder"]["encoder.layers.1.mlp.fc1.lora_A.weight"] = torch.ones(4, 32)
    parts["text_encoder"]["encoder.layers.1.mlp.fc1.lora_B.weight"] = torch.ones(64, 4)
    file = save_lora_parts(tmp_path / "c.safetensors", parts, 4, 4.0, base_model_version="stable_cascade_v1",
                           module_names=model.lora_module_names())
    keys = set(load_file(str(file)))
    assert {
        "lora_prior_unet_down_blocks_0_2_attention_attn_to_q.lora_up.weight",
        "lora_prior_unet_down_blocks_0_2_attention_attn_out_proj.lora_down.weight",
        "lora_prior_unet_down_blocks_0_1_mapper_crp.alpha",
        "lora_prior_te_text_model_encoder_layers_1_mlp_fc1.lora_up.weight",
    } <= keys
    # ComfyUI's names for the prior's weights: the original key with `_` (attention split into to_q/k/v)
    original = model.save_single_file(tmp_path / "sc.safetensors", None)
    comfy = {"lora_prior_unet_" + k.removesuffix(".weight").replace(".", "_") for k in load_file(str(original)) if k.endswith(".weight")}
    comfy |= {"lora_prior_unet_" + k.replace(".attn.in_proj_weight", f".attn.to_{p}").replace(".", "_")
              for k in load_file(str(original)) if k.endswith("in_proj_weight") for p in "qkv"}
    assert {k.split(".")[0] for k in keys if k.startswith("lora_prior_unet_")} <= comfy
    loaded = load_lora_file(file, module_names=model.lora_module_names())
    assert set(loaded.parts["prior"]) == set(parts["prior"])
