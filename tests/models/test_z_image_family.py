"""The Z-Image family on the tiny model: loading (folder, tiny name, the original transformer
file), text encoding exactly as ZImagePipeline does it, predict's timestep and sign conventions
checked against the pipeline's own denoising steps, sampling, saving, and a LoRA that
ZImagePipeline loads and ComfyUI's Z-Image key map places."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.schema import TrainConfig
from ot_gradio.models.z_image import ZImage
from ot_gradio.training.lora import select_lora_targets
from ot_gradio.training.lora_format import DIFFUSERS, save_lora
from tests.e2e.runs import local_pipeline, lora_load_problems
from tests.models.family_checks import (
    add_random_lora,
    assert_same_parts,
    assert_sample_uses_cfg_and_the_negative_prompt,
    family_fixtures,
    pipeline_images,
)

CPU = torch.device("cpu")
PROMPT = "a red circle"
tiny_z_paths, zimage = family_fixtures("z-image", ZImage, "tiny_z_paths", "zimage")
_images = pipeline_images(guidance_scale=0.0)


def test_tiny_model_has_z_image_s_classes(zimage):
    """Loading by name, by folder, from the file: tests/models/test_families.py."""
    assert zimage.transformer.config.in_channels == 16 and zimage.vae.config.shift_factor
    assert type(zimage.text_encoder).__name__ == "Qwen3Model"


def test_encode_text_is_exactly_what_the_pipeline_feeds_the_transformer(zimage):
    rendered = zimage.chat_prompts([PROMPT])[0]
    assert rendered == f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"
    prompts = [PROMPT, "a much longer caption about a blue square on grey"]
    cond = zimage.encode_text(prompts)
    assert cond["encoder_hidden_states"].shape == (2, 512, 32) and cond["attention_mask"].dtype == torch.bool
    expected = zimage.pipeline()._encode_prompt(list(prompts), device="cpu", max_sequence_length=512)
    ours = zimage.prompt_list(cond)
    assert [e.shape[0] for e in ours] == [int(m.sum()) for m in cond["attention_mask"]] and ours[0].shape[0] < ours[1].shape[0]
    for got, want in zip(ours, expected, strict=True):
        assert torch.equal(got, want)
    assert not cond["encoder_hidden_states"][0, ours[0].shape[0]:].any()  # zero past the prompt
    zimage.layer_skips = {"text_encoder": 1}
    try:
        assert not torch.equal(zimage.prompt_list(zimage.encode_text([PROMPT]))[0], ours[0])
    finally:
        zimage.layer_skips = {}
    with pytest.raises(ValueError, match="text_encoder_layer_skip: 3"):
        zimage.layer_skips = {"text_encoder": 3}


def test_predict_and_euler_steps_reproduce_the_pipelines_denoising(zimage):
    """predict(x, t) is the velocity noise - latents: Euler steps x += (t_next - t) * v with the
    pipeline's own sigmas land where ZImagePipeline's loop (timestep 1 - sigma, -output) does."""
    from diffusers.pipelines.z_image.pipeline_z_image import calculate_shift, get_default_z_image_sigmas

    noise = torch.randn(1, 16, 8, 6, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs = zimage.pipeline()(
            prompt_embeds=zimage.prompt_list(zimage.encode_text([PROMPT])), guidance_scale=0.0, latents=noise.clone(),
            height=64, width=48, num_inference_steps=3, output_type="latent",
        ).images
        scheduler = type(zimage.scheduler).from_config(zimage.scheduler.config)
        mu = calculate_shift(zimage.image_seq_len(noise), *(zimage.scheduler.config[k] for k in
                             ("base_image_seq_len", "max_image_seq_len", "base_shift", "max_shift")))
        scheduler.set_timesteps(sigmas=get_default_z_image_sigmas(3), mu=mu)
        sigmas = scheduler.sigmas.tolist()
        assert sigmas[0] == 1.0 and sigmas[1] > 2 / 3  # shifted toward noise (shift 3)
        cond, x = zimage.encode_text([PROMPT]), noise.clone()
        for t, t_next in zip(sigmas[:-1], sigmas[1:], strict=True):
            x = x + (t_next - t) * zimage.predict(x, torch.tensor([t]), cond)
    torch.testing.assert_close(x, theirs, atol=1e-5, rtol=1e-5)
    latents = zimage.encode_images(torch.rand(2, 3, 64, 48) * 2 - 1, sample=False)
    assert latents.shape == (2, 16, 8, 6) and zimage.image_seq_len(latents) == 12
    with torch.no_grad():
        v = zimage.predict(latents, torch.tensor([0.2, 0.9]), zimage.encode_text(["a", "b c d"]))
    assert v.shape == latents.shape and zimage.schedule_kind == "flow_matching" and zimage.prediction_type == "flow"


def test_sample_uses_cfg_and_the_negative_prompt_and_keeps_modes(zimage):
    assert_sample_uses_cfg_and_the_negative_prompt(zimage, PROMPT, plain_cfg=0.0)


def test_save_diffusers_and_the_original_transformer_file_round_trip(zimage, tmp_path):
    from diffusers import ZImageTransformer2DModel

    out = zimage.save_diffusers(tmp_path / "out", None)
    again = ZImage.load(str(out))
    assert_same_parts(zimage, again)
    single = zimage.save_single_file(tmp_path / "t.safetensors", "BFLOAT_16")
    with safe_open(str(single), "pt") as f:
        keys = set(f.keys())
        assert {f.get_slice(k).get_dtype() for k in keys} == {"BF16"}
    assert {"layers.0.attention.qkv.weight", "x_embedder.weight", "final_layer.linear.weight",
            "layers.0.attention.out.weight", "layers.0.attention.q_norm.weight"} <= keys
    loaded = ZImageTransformer2DModel.from_single_file(str(single), config=str(out), subfolder="transformer", local_files_only=True)
    a = loaded.state_dict()
    for k, v in zimage.transformer.state_dict().items():
        assert torch.equal(a[k], v.to(torch.bfloat16).to(a[k].dtype)), k


def test_layer_presets_are_onetrainers(zimage):
    presets = zimage.lora_layer_presets["transformer"]
    pick = {p: select_lora_targets(zimage.transformer, kind="unet", layer_preset=p, presets=presets) for p in presets}
    assert pick["attn-mlp"] and all(n.startswith("layers.") and (".attention." in n or ".feed_forward." in n) for n in pick["attn-mlp"])
    assert len(pick["attn-mlp"]) == 2 * (4 + 3) and set(pick["attn-only"]) < set(pick["attn-mlp"])
    assert any("refiner" in n for n in pick["full"])
    # what OneTrainer's z-image presets write as regexes selects the same layers
    regex = "^(?=.*attention)(?!.*refiner).*,^(?=.*feed_forward)(?!.*refiner).*"
    assert select_lora_targets(zimage.transformer, kind="unet", layer_preset="custom", layer_filter=regex,
                               layer_filter_regex=True) == pick["attn-mlp"]


def test_diffusers_lora_loads_in_zimage_pipeline_and_comfyui_places_every_key(tiny_z_paths, tmp_path):
    from diffusers import ZImagePipeline

    from ot_gradio.models.z_image_keys import comfy_lora_targets

    model = ZImage.load(str(tiny_z_paths.diffusers_dir))
    base = _images(model.pipeline(), prompt=PROMPT)
    add_random_lora(model, lora_rank=4, lora_alpha=2.0, layer_filter_preset="full")
    trained = _images(model.pipeline(), prompt=PROMPT)
    path = save_lora(tmp_path / "d.safetensors", {"transformer": model.transformer},
                     base_model_version=model.lora_base_model_version, lora_format=DIFFUSERS)
    pipe = local_pipeline(tiny_z_paths.diffusers_dir, ZImagePipeline)
    assert lora_load_problems(pipe, path) == []
    image = _images(pipe, prompt=PROMPT)
    np.testing.assert_allclose(image, trained, atol=1e-5)
    assert np.abs(image - base).max() > 1e-3
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
    targets = comfy_lora_targets(pipe.transformer, keys)
    assert any(p.key.endswith(".attention.qkv.weight") and p.rows for p in targets.values())
    assert len(targets) == len({k.rsplit(".lora_", 1)[0] for k in keys})


def test_float8_transformer_keeps_its_embedders_and_samples(tiny_z_paths):
    """configure_flow keeps t_embedder / cap_embedder out of the FLOAT_8 quantization that follows
    (diffusers' timestep embedder casts its input to its weight's dtype: a float8 input broke SiLU
    outside autocast); the blocks are quantized and the model still samples."""
    from ot_gradio.config.enums import DataType
    from ot_gradio.training.quantize import LinearFp8, quantize_linear_layers

    model = ZImage.load(str(tiny_z_paths.diffusers_dir))
    model.configure_flow(TrainConfig.model_validate({"model_type": "Z_IMAGE", "text_encoder_sequence_length": None}))
    assert model.text_encoder_sequence_length == 512 == model.tokenizer.model_max_length
    quantize_linear_layers(model.transformer, DataType.FLOAT_8, CPU, torch.float32, "transformer")
    kinds = {name: type(m) for name, m in model.transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    assert kinds["layers.0.attention.to_q"] is LinearFp8 and kinds["noise_refiner.0.feed_forward.w1"] is LinearFp8
    assert kinds["t_embedder.mlp.0"] is not LinearFp8 and kinds["cap_embedder.1"] is not LinearFp8
    assert model.transformer.t_embedder.mlp[0].weight.dtype == torch.float32
    assert model.sample(PROMPT, "", height=32, width=32, steps=2, cfg_scale=0.0).size == (32, 32)
