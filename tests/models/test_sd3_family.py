"""The SD 3 / 3.5 family on the tiny models: loading, text encoding as the pipeline does it, the
flow-matching predict, sampling, saving, and LoRA files that StableDiffusion3Pipeline and
ComfyUI's key rules accept."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.schema import TrainConfig
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.sd3 import StableDiffusion3, StableDiffusion35
from ot_gradio.training.lora import add_lora, lora_state_dict
from ot_gradio.training.lora_format import DIFFUSERS, KOHYA, load_lora_file, save_lora
from tests.e2e.runs import lora_load_problems
from tests.models.family_checks import add_random_lora, assert_same_parts, family_fixtures, pipeline_images

PROMPT = "a red circle"
tiny_sd3_paths, sd3 = family_fixtures("sd3", StableDiffusion3, "tiny_sd3_paths", "sd3")
_images = pipeline_images(max_sequence_length=77)


def _config(**values) -> TrainConfig:
    return TrainConfig.model_validate({"model_type": "STABLE_DIFFUSION_3", **values})


# ------------------------------------------------------------------ loading and the flow contract


def test_tiny_models_have_sd3_s_and_sd35_s_configs(sd3):
    """Loading by name, by folder, from the file: tests/models/test_families.py."""
    assert sd3.transformer.config.in_channels == 16 and sd3.vae.config.shift_factor
    by_name = StableDiffusion35.load("tiny:sd35")
    assert by_name.transformer.config.qk_norm == "rms_norm" and by_name.transformer.config.dual_attention_layers == [0]
    assert by_name.noise_scheduler.config.shift == 3.0


def test_encode_text_is_what_the_pipeline_feeds_the_transformer(sd3):
    cond = sd3.encode_text([PROMPT])
    embeds, _, pooled, _ = sd3.pipeline().encode_prompt(PROMPT, None, None, device="cpu", max_sequence_length=77)
    assert cond["encoder_hidden_states"].shape == (1, 77 + 77, 96)  # CLIPs padded to T5's width, then T5
    torch.testing.assert_close(cond["encoder_hidden_states"], embeds, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cond["pooled_projections"], pooled, atol=1e-5, rtol=1e-5)
    per_encoder = sd3.encode_text({"text_encoder": [""], "text_encoder_2": [PROMPT], "text_encoder_3": [PROMPT]})
    assert not torch.equal(per_encoder["pooled_projections"][:, :32], cond["pooled_projections"][:, :32])
    torch.testing.assert_close(per_encoder["pooled_projections"][:, 32:], cond["pooled_projections"][:, 32:])


def test_t5_reads_the_configured_window_as_the_pipeline_does(tiny_sd3_paths):
    model = StableDiffusion3.load(str(tiny_sd3_paths.diffusers_dir))
    model.configure_flow(_config(text_encoder_3_sequence_length=96))
    cond = model.encode_text([PROMPT])
    embeds, _, _, _ = model.pipeline().encode_prompt(PROMPT, None, None, device="cpu", max_sequence_length=96)
    assert cond["encoder_hidden_states"].shape == (1, 77 + 96, 96)
    torch.testing.assert_close(cond["encoder_hidden_states"], embeds, atol=1e-5, rtol=1e-5)
    model.configure_flow(_config())  # OneTrainer's 77 by default
    assert model.encode_text([PROMPT])["encoder_hidden_states"].shape == (1, 77 + 77, 96)


def test_attention_mask_zeroes_the_padding_of_all_three_encoders(tiny_sd3_paths, tmp_path):
    from tests.models.family_checks import assert_padding_mask_reaches_training_and_samples

    model = StableDiffusion3.load(str(tiny_sd3_paths.diffusers_dir), offline=True)
    prompts = ["a", PROMPT]
    off = model.encode_text(prompts)
    model.mask_padding_tokens = True
    on = model.encode_text(prompts)
    masks = [model.tokenizers[part](prompts, padding="max_length", max_length=77, truncation=True, return_tensors="pt").attention_mask
             for part in ("text_encoder", "text_encoder_2", "text_encoder_3")]
    assert all(0 < int(m[0].sum()) < int(m[1].sum()) < 77 for m in masks)
    w1, w2 = model.text_encoder.config.hidden_size, model.text_encoder_2.config.hidden_size
    expected = off["encoder_hidden_states"].clone()
    expected[:, :77, :w1] *= masks[0][:, :, None]
    expected[:, :77, w1:w1 + w2] *= masks[1][:, :, None]
    expected[:, 77:] *= masks[2][:, :, None]
    assert not torch.equal(expected, off["encoder_hidden_states"])
    torch.testing.assert_close(on["encoder_hidden_states"], expected)
    torch.testing.assert_close(on["pooled_projections"], off["pooled_projections"])
    model.mask_padding_tokens = False
    assert_padding_mask_reaches_training_and_samples(model, (1, 16, 8, 8), tmp_path, cfg_scale=4.0)


def test_predict_latents_and_the_flow_options(sd3):
    pixels = torch.rand(2, 3, 64, 48) * 2 - 1
    raw = sd3.vae.encode(pixels).latent_dist.mean
    latents = sd3.encode_images(pixels, sample=False)
    torch.testing.assert_close(latents, (raw - sd3.vae.config.shift_factor) * sd3.vae.config.scaling_factor)
    assert latents.shape == (2, 16, 8, 6) and sd3.image_seq_len(latents) == 4 * 3
    cond = sd3.encode_text(["a", "b"])
    t = torch.tensor([0.25, 0.9])
    with torch.no_grad():
        velocity = sd3.predict(latents, t, cond)
        direct = sd3.transformer(
            hidden_states=latents, encoder_hidden_states=cond["encoder_hidden_states"],
            pooled_projections=cond["pooled_projections"], timestep=torch.tensor([250.0, 900.0]),
        ).sample
    assert velocity.shape == latents.shape
    torch.testing.assert_close(velocity, direct)
    assert sd3.schedule_kind == "flow_matching" and sd3.prediction_type == "flow"
    with pytest.raises(ValueError, match="force_v_prediction"):
        sd3.configure_noise_schedule(prediction_type="v_prediction")
    with pytest.raises(ValueError, match="zero_terminal_snr"):
        sd3.configure_noise_schedule(zero_terminal_snr=True)
    with pytest.raises(ValueError, match="text_encoder_layer_skip: 5"):
        sd3.layer_skips = {"text_encoder": 5}


def test_sample_uses_cfg_and_the_negative_prompt_and_keeps_modes(sd3):
    sd3.transformer.train()
    image = sd3.sample(PROMPT, "", height=40, width=56, steps=2, cfg_scale=5.0)
    assert image.size == (56, 40) and sd3.transformer.training
    negative = sd3.sample(PROMPT, "blue", height=40, width=56, steps=2, cfg_scale=5.0)
    no_cfg = sd3.sample(PROMPT, "blue", height=40, width=56, steps=2, cfg_scale=1.0)
    assert np.abs(np.asarray(image, float) - np.asarray(negative, float)).max() > 0
    assert np.abs(np.asarray(negative, float) - np.asarray(no_cfg, float)).max() > 0
    sd3.transformer.eval()


def test_save_diffusers_round_trip(sd3, tmp_path):
    out = sd3.save_diffusers(tmp_path / "out", None)
    again = StableDiffusion3.load(str(out))
    assert_same_parts(sd3, again)
    assert again.tokenizer_3.model_max_length == sd3.tokenizer_3.model_max_length


@pytest.mark.parametrize("family, name", [(StableDiffusion3, "tiny:sd3"), (StableDiffusion35, "tiny:sd35")])
def test_single_file_is_sais_layout_and_reloads_tensor_by_tensor(family, name, tmp_path):
    from ot_gradio.models.tiny import resolve_tiny

    model = family.load(name)
    path = model.save_single_file(tmp_path / "m.safetensors", None)
    with safe_open(str(path), "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
    assert {"model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight", "model.diffusion_model.pos_embed",
            "model.diffusion_model.final_layer.adaLN_modulation.1.weight", "first_stage_model.encoder.conv_in.weight"} <= keys
    assert ("model.diffusion_model.joint_blocks.0.x_block.attn2.qkv.weight" in keys) == (family is StableDiffusion35)
    assert {k.split(".")[1] for k in keys if k.startswith("text_encoders.")} == {"clip_l", "clip_g", "t5xxl"}  # their own test:
    assert meta["ot_gradio.model_type"] == family.model_type.value  # test_sd3_single_file_text_encoders.py
    again = family.load(str(path), config_dir=str(resolve_tiny(name).diffusers_dir), offline=True)
    for part in ("transformer", "vae"):
        a, b = model.parts[part].state_dict(), again.parts[part].state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), part
    with pytest.raises(ModelLoadError, match="not a diffusers model"):
        family.load(str(path), config_dir=str(tmp_path), offline=True)


# ------------------------------------------------------------------ LoRA


def test_layer_presets_are_onetrainers(sd3):
    from ot_gradio.training.lora import select_lora_targets

    presets = sd3.lora_layer_presets["transformer"]
    pick = {p: select_lora_targets(sd3.transformer, kind="unet", layer_preset=p, presets=presets) for p in presets}
    assert pick["attn-only"] and all(".attn." in n for n in pick["attn-only"])
    assert set(pick["attn-mlp"]) - set(pick["attn-only"]) == {f"transformer_blocks.{i}.ff.net.{j}" for i in range(2) for j in ("0.proj", "2")}
    assert all(n.startswith("transformer_blocks.") for n in pick["blocks"]) and "transformer_blocks.0.norm1.linear" in pick["blocks"]
    assert {"pos_embed.proj", "context_embedder", "proj_out", "norm_out.linear"} <= set(pick["full"])


@pytest.fixture(scope="module")
def lora_model(tiny_sd3_paths):
    """Tiny SD 3 with LoRA (LORA method, 'full' preset) on the transformer and both CLIPs."""
    model = StableDiffusion3.load(str(tiny_sd3_paths.diffusers_dir))
    base = _images(model.pipeline(), prompt=PROMPT)
    add_random_lora(model, ("transformer", "text_encoder", "text_encoder_2"), lora_rank=4, lora_alpha=2.0,
                    text_encoder={"train": True}, text_encoder_2={"train": True})
    return model, base, _images(model.pipeline(), prompt=PROMPT)


def _load_in_diffusers(folder, path):
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline.from_pretrained(str(folder), local_files_only=True)
    return pipe, lora_load_problems(pipe, path, ("diffusers", "transformers", "peft"), must_log=True)


def test_diffusers_lora_loads_in_the_sd3_pipeline_like_the_trained_model(lora_model, tiny_sd3_paths, tmp_path):
    model, base, trained = lora_model
    parts = {p: getattr(model, p) for p in ("transformer", "text_encoder", "text_encoder_2")}
    path = save_lora(tmp_path / "d.safetensors", parts, base_model_version=model.lora_base_model_version, lora_format=DIFFUSERS)
    pipe, problems = _load_in_diffusers(tiny_sd3_paths.diffusers_dir, path)
    assert problems == []
    image = _images(pipe, prompt=PROMPT)
    np.testing.assert_allclose(image, trained, atol=1e-5)
    assert np.abs(image - base).max() > 1e-3
    with safe_open(str(path), "pt") as f:
        assert comfyui_unmapped(set(f.keys()), model) == {k for k in f.keys() if ".text_projection." in k}


def test_t5_lora_with_diffusers_keys_is_refused_before_training():
    with pytest.raises(ValueError, match="text_encoder_3.train: a T5 LoRA cannot be saved as SAFETENSORS"):
        StableDiffusion3.configure_flow(
            StableDiffusion3.__new__(StableDiffusion3),
            _config(training_method="LORA", output_model_format="SAFETENSORS", text_encoder_3={"train": True}),
        )


def test_kohya_lora_has_onetrainer_names_comfyui_maps_and_reads_back(tiny_sd3_paths, tmp_path):
    model = StableDiffusion3.load(str(tiny_sd3_paths.diffusers_dir))
    parts = {}
    for part in ("transformer", *model.text_encoder_names):
        add_lora(getattr(model, part), kind="unet" if part == "transformer" else "text_encoder", rank=2, alpha=1.0,
                 dropout=0.0, layer_preset="full", presets=model.lora_layer_presets[part])
        parts[part] = getattr(model, part)
    for module in parts.values():
        for p in module.parameters():
            if p.requires_grad:
                torch.nn.init.normal_(p)
    path = save_lora(tmp_path / "k.safetensors", parts, base_model_version="sd3", lora_format=KOHYA,
                     module_names=model.lora_module_names())
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
    for key in ("lora_transformer_transformer_blocks_0_attn_add_q_proj.lora_up.weight",
                "lora_transformer_time_text_embed_text_embedder_linear_1.alpha",
                "lora_te1_text_model_encoder_layers_1_self_attn_q_proj.lora_down.weight",
                "lora_te2_text_projection.lora_up.weight",
                "lora_te3_encoder_block_1_layer_1_DenseReluDense_wi_0.lora_up.weight"):
        assert key in keys
    assert comfyui_unmapped(keys, model) == set()
    loaded = load_lora_file(path, module_names=model.lora_module_names())
    for part, module in parts.items():
        expected = {k.removeprefix("text_model."): v for k, v in lora_state_dict(module).items()}  # files' in-memory form
        assert loaded.parts[part].keys() == expected.keys(), part
        assert all(torch.equal(loaded.parts[part][k], expected[k]) for k in expected)


# ------------------------------------------------------------------ ComfyUI's key rules


# comfy/lora.py `load_lora`: the tensor names it reads for a layer name x (LoRA, LyCORIS, DoRA)
_COMFY_SUFFIXES = (
    ".alpha", ".dora_scale", ".lora_up.weight", ".lora_down.weight", ".lora_mid.weight", ".lora_B.weight", ".lora_A.weight",
    ".hada_w1_a", ".hada_w1_b", ".hada_w2_a", ".hada_w2_b", ".hada_t1", ".hada_t2",
    ".lokr_w1", ".lokr_w2", ".lokr_w1_a", ".lokr_w1_b", ".lokr_w2_a", ".lokr_w2_b", ".lokr_t2",
)
# comfy/utils.py MMDIT_MAP_BLOCK / MMDIT_MAP_BASIC (diffusers side) and the fused q/k/v slices
_MMDIT_BLOCK = ("attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj",
                "norm1_context.linear", "attn.to_add_out", "ff_context.net.0.proj", "ff_context.net.2",
                "norm1.linear", "attn.to_out.0", "ff.net.0.proj", "ff.net.2")
_MMDIT_BASIC = ("context_embedder", "time_text_embed.timestep_embedder.linear_1", "time_text_embed.timestep_embedder.linear_2",
                "pos_embed.proj", "time_text_embed.text_embedder.linear_1", "time_text_embed.text_embedder.linear_2",
                "norm_out.linear", "proj_out")
# comfy/lora.py LORA_CLIP_MAP
_CLIP_LAYERS = ("mlp.fc1", "mlp.fc2", "self_attn.k_proj", "self_attn.q_proj", "self_attn.v_proj", "self_attn.out_proj")


def comfyui_layer_names(model) -> set[str]:
    """The LoRA layer names ComfyUI's model_lora_keys_unet / model_lora_keys_clip accept for an SD 3
    model with CLIP-L, CLIP-G and T5 (written from its rules: `transformer.` and OneTrainer's
    `lora_transformer_` for every diffusers MMDiT weight it maps; `lora_te1_`/`lora_te2_` and
    `text_encoder(_2).text_model.` for CLIP layers; `lora_te{1,2}_text_projection`; T5 weights as
    `lora_te3_` since both CLIPs are present)."""
    paths = [f"transformer_blocks.{i}.{s}" for i in range(model.transformer.config.num_layers) for s in _MMDIT_BLOCK]
    paths += list(_MMDIT_BASIC)
    names = {f"transformer.{p}" for p in paths} | {"lora_transformer_" + p.replace(".", "_") for p in paths}
    for te, kohya in (("text_encoder", "lora_te1_"), ("text_encoder_2", "lora_te2_")):
        for b in range(getattr(model, te).config.num_hidden_layers):
            for c in _CLIP_LAYERS:
                names.add(f"{kohya}text_model_encoder_layers_{b}_{c.replace('.', '_')}")
                names.add(f"{te}.text_model.encoder.layers.{b}.{c}")
        names.add(f"{kohya}text_projection")
    t5 = [k.removesuffix(".weight").replace(".base_layer", "") for k in model.text_encoder_3.state_dict()
          if k.endswith(".weight") and ".lora_" not in k]
    names |= {"lora_te3_" + k.replace(".", "_") for k in t5}
    return names


def comfyui_unmapped(keys: set[str], model) -> set[str]:
    known = comfyui_layer_names(model)
    out = set()
    for key in keys:
        suffix = next((s for s in _COMFY_SUFFIXES if key.endswith(s)), None)
        if suffix is None or key[: -len(suffix)] not in known:
            out.add(key)
    return out


def test_sd35_medium_and_large_are_labelled_apart():
    """Medium (dual-attention layers) and Large (none) share the model type; the file headers
    name which one was trained."""
    from types import SimpleNamespace

    from diffusers import SD3Transformer2DModel

    from ot_gradio.training.output_metadata import architecture

    medium = StableDiffusion35.load("tiny:sd35")  # dual_attention_layers [0], as Medium's 0-12
    assert architecture(medium, "lora") == "stable-diffusion-v3.5-medium/lora"
    assert architecture(medium, "checkpoint") == "stable-diffusion-v3.5-medium"
    large = SD3Transformer2DModel.from_config({**medium.transformer.config, "dual_attention_layers": ()})
    assert StableDiffusion35.modelspec_architecture.fget(SimpleNamespace(transformer=large)) == "stable-diffusion-v3.5-large"
