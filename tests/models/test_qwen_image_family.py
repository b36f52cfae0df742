"""The Qwen-Image family on the tiny model: loading (folder, tiny name, the transformer file),
text encoding exactly as QwenImagePipeline does it, predict checked against the pipeline's own
denoising steps, the VAE's per-channel normalisation, sampling with true CFG, saving, and a LoRA
that QwenImagePipeline loads (diffusers and kohya keys) and ComfyUI's key rules place."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open

from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.qwen_image import QwenImage, comfy_lora_targets
from ot_gradio.training.lora import select_lora_targets
from ot_gradio.training.lora_format import DIFFUSERS, KOHYA, save_lora
from ot_gradio.training.lora_method import kohya_module_names
from tests.e2e.runs import local_pipeline, lora_load_problems
from tests.models.family_checks import (
    add_random_lora,
    assert_same_parts,
    assert_sample_uses_cfg_and_the_negative_prompt,
    family_fixtures,
    pipeline_images,
)

PROMPT = "a red circle"
tiny_qwen_paths, qwen = family_fixtures("qwen-image", QwenImage, "tiny_qwen_paths", "qwen")
_images = pipeline_images(size=32, true_cfg_scale=1.0)


def test_tiny_model_has_qwen_image_s_classes_and_a_z_image_is_refused(qwen, tiny_dir):
    """Loading by name, by folder, from the file: tests/models/test_families.py."""
    from ot_gradio.models.tiny import resolve_tiny

    assert type(qwen.text_encoder).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert type(qwen.vae).__name__ == "AutoencoderKLQwenImage" and qwen.vae_scale_factor == 2
    with pytest.raises(ModelLoadError):
        QwenImage.load(str(resolve_tiny("tiny:z-image").diffusers_dir))


def test_encode_text_is_exactly_what_the_pipeline_feeds_the_transformer(qwen):
    prompts = [PROMPT, "a much longer caption about a blue square on grey"]
    cond = qwen.encode_text(prompts)
    assert cond["encoder_hidden_states"].shape == (2, 512, 32) and cond["attention_mask"].dtype == torch.bool
    embeds, mask = qwen.pipeline().encode_prompt(prompts, device="cpu", max_sequence_length=512)
    hidden, ours = qwen.trimmed(cond)
    assert hidden.shape == embeds.shape and torch.equal(ours, mask)
    torch.testing.assert_close(hidden, embeds, atol=1e-6, rtol=1e-6)
    lengths = cond["attention_mask"].sum(1)
    assert lengths[0] < lengths[1] and not cond["encoder_hidden_states"][0, lengths[0]:].any()
    qwen.layer_skips = {"text_encoder": 1}
    try:
        assert not torch.equal(qwen.encode_text([PROMPT])["encoder_hidden_states"], cond["encoder_hidden_states"][:1])
    finally:
        qwen.layer_skips = {}
    with pytest.raises(ValueError, match="text_encoder_layer_skip: 2 is out of range"):
        qwen.layer_skips = {"text_encoder": 2}
    qwen.text_encoder_sequence_length = 40
    try:
        short = qwen.encode_text(prompts)
        assert short["encoder_hidden_states"].shape[1] == 40 and qwen.tokenizer.model_max_length == 74
        embeds, _ = qwen.pipeline().encode_prompt(prompts, device="cpu", max_sequence_length=40)
        assert int(short["attention_mask"].sum(1).max()) <= 40
    finally:
        qwen.text_encoder_sequence_length = None
    assert qwen.tokenizer.model_max_length == 512 + 34


def test_predict_and_euler_steps_reproduce_the_pipelines_denoising(qwen):
    """predict(x, t) is the velocity noise - latents: Euler steps x += (t_next - t) * v with the
    pipeline's own shifted sigmas land where QwenImagePipeline's loop does."""
    from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift

    from ot_gradio.models.flow_family import pack_latents, unpack_latents

    noise = torch.randn(1, 4, 16, 12, generator=torch.Generator().manual_seed(3))
    cond = qwen.encode_text([PROMPT])
    hidden, mask = qwen.trimmed(cond, keep_mask=True)
    with torch.no_grad():
        theirs = qwen.pipeline()(
            prompt_embeds=hidden, prompt_embeds_mask=mask, true_cfg_scale=1.0, latents=pack_latents(noise),
            height=32, width=24, num_inference_steps=3, output_type="latent",
        ).images
        scheduler = type(qwen.scheduler).from_config(qwen.scheduler.config)
        mu = calculate_shift(qwen.image_seq_len(noise), *(qwen.scheduler.config[k] for k in
                             ("base_image_seq_len", "max_image_seq_len", "base_shift", "max_shift")))
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / 3, 3), mu=mu)
        sigmas = scheduler.sigmas.tolist()
        x = noise.clone()
        for t, t_next in zip(sigmas[:-1], sigmas[1:], strict=True):
            x = x + (t_next - t) * qwen.predict(x, torch.tensor([t]), cond)
    torch.testing.assert_close(x, unpack_latents(theirs, 16, 12), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        v = qwen.predict(noise.repeat(2, 1, 1, 1), torch.tensor([0.2, 0.9]), qwen.encode_text(["a", "b c d"]))
    assert v.shape == (2, 4, 16, 12) and qwen.schedule_kind == "flow_matching" and qwen.prediction_type == "flow"


def test_latents_are_normalised_per_channel_and_decode_back(qwen):
    pixels = torch.rand(2, 3, 32, 24) * 2 - 1
    latents = qwen.encode_images(pixels, sample=False)
    raw = qwen.vae.encode(pixels.unsqueeze(2)).latent_dist.mean.squeeze(2)
    mean = torch.tensor(qwen.vae.config.latents_mean).view(1, -1, 1, 1)
    std = torch.tensor(qwen.vae.config.latents_std).view(1, -1, 1, 1)
    assert latents.shape == (2, 4, 16, 12)
    torch.testing.assert_close(latents, (raw - mean) / std)
    decoded = qwen.decode_latents(latents)
    expected = qwen.vae.decode(raw.unsqueeze(2)).sample.squeeze(2)
    torch.testing.assert_close(decoded, expected, atol=1e-5, rtol=1e-5)


def test_sample_uses_true_cfg_and_the_negative_prompt_and_keeps_modes(qwen):
    assert_sample_uses_cfg_and_the_negative_prompt(qwen, PROMPT, plain_cfg=1.0)


def test_save_diffusers_and_the_transformer_file_round_trip(qwen, tmp_path):
    from diffusers import QwenImageTransformer2DModel

    out = qwen.save_diffusers(tmp_path / "out", None)
    again = QwenImage.load(str(out))
    assert_same_parts(qwen, again)
    single = qwen.save_single_file(tmp_path / "t.safetensors", "BFLOAT_16")
    with safe_open(str(single), "pt") as f:
        keys = set(f.keys())
        assert {f.get_slice(k).get_dtype() for k in keys} == {"BF16"}
        assert f.metadata()["modelspec.architecture"] == "qwen-image"
    assert keys == set(qwen.transformer.state_dict())
    loaded = QwenImageTransformer2DModel.from_single_file(str(single), config=str(out), subfolder="transformer", local_files_only=True)
    a = loaded.state_dict()
    for k, v in qwen.transformer.state_dict().items():
        assert torch.equal(a[k], v.to(torch.bfloat16).to(a[k].dtype)), k


def test_layer_presets_are_onetrainers(qwen):
    presets = qwen.lora_layer_presets["transformer"]
    pick = {p: select_lora_targets(qwen.transformer, kind="unet", layer_preset=p, presets=presets) for p in presets}
    assert pick["attn-mlp"] and all(".attn." in n or "_mlp." in n for n in pick["attn-mlp"])
    assert set(pick["attn-only"]) < set(pick["attn-mlp"]) < set(pick["full"])
    assert not any(n.startswith(("img_in", "txt_in", "proj_out")) for n in pick["blocks"])
    # OneTrainer's qwen preset writes the attn-mlp filter as "attn,img_mlp,txt_mlp"
    assert select_lora_targets(qwen.transformer, kind="unet", layer_preset="custom", layer_filter="attn,img_mlp,txt_mlp") == pick["attn-mlp"]
    te = qwen.lora_layer_presets["text_encoder"]
    te_pick = select_lora_targets(qwen.text_encoder, kind="text_encoder", layer_preset="full", presets=te)
    assert te_pick and all("language_model.layers." in n for n in te_pick)  # never the vision tower or lm_head


def test_lora_files_load_in_the_pipeline_and_comfyui_places_every_key(tiny_qwen_paths, tmp_path):
    from diffusers import QwenImagePipeline

    model = QwenImage.load(str(tiny_qwen_paths.diffusers_dir))
    base = _images(model.pipeline(), prompt=PROMPT)
    add_random_lora(model, lora_rank=4, lora_alpha=2.0, layer_filter_preset="full")
    trained = _images(model.pipeline(), prompt=PROMPT)
    for fmt in (DIFFUSERS, KOHYA):
        path = save_lora(tmp_path / f"{fmt}.safetensors", {"transformer": model.transformer},
                         base_model_version=model.lora_base_model_version, lora_format=fmt,
                         module_names=kohya_module_names(model))
        pipe = local_pipeline(tiny_qwen_paths.diffusers_dir, QwenImagePipeline)
        assert lora_load_problems(pipe, path) == [], fmt
        image = _images(pipe, prompt=PROMPT)
        np.testing.assert_allclose(image, trained, atol=1e-5, err_msg=fmt)
        assert np.abs(image - base).max() > 1e-3
        with safe_open(str(path), "pt") as f:
            keys = list(f.keys())
        targets = comfy_lora_targets(pipe.transformer, keys)
        assert len(targets) == len({k.rsplit(".lora_", 1)[0].removesuffix(".alpha") for k in keys if ".lora_" in k})
        assert set(targets.values()) >= {"diffusion_model.transformer_blocks.0.attn.to_q.weight", "diffusion_model.img_in.weight"}
    with pytest.raises(ValueError, match="no weight"):
        comfy_lora_targets(pipe.transformer, ["transformer.nowhere.lora_A.weight"])
