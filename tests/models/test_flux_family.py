"""Flux.1 dev on the tiny model: loading (tiny, folder, BFL transformer file), the flow contract
(latents, packing, guidance), sampling, saving, and LoRA files that FluxPipeline and ComfyUI's
Flux key rules load."""

from __future__ import annotations

import logging

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_flux_paths(tiny_dir):
    from ot_gradio.models.tiny import resolve_tiny

    return resolve_tiny("tiny:flux")


@pytest.fixture(scope="session")
def flux(tiny_flux_paths):
    from ot_gradio.models.flux import FluxDev1

    return FluxDev1.load("tiny:flux", offline=True)


@pytest.fixture
def fresh(tiny_flux_paths):
    from ot_gradio.models.flux import FluxDev1

    return FluxDev1.load(str(tiny_flux_paths.diffusers_dir), offline=True)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module, dtype: torch.dtype = torch.float32) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k].to(dtype), sb[k].to(dtype)), k


def test_loads_from_folder_and_bfl_file_with_the_same_weights(flux, tiny_flux_paths):
    from ot_gradio.models.flux import FluxDev1

    single = FluxDev1.load(str(tiny_flux_paths.single_file), offline=True, config_dir=str(tiny_flux_paths.diffusers_dir),
                           dtypes={"transformer": torch.bfloat16})
    assert single.transformer.dtype == torch.bfloat16 and single.text_encoder_2.dtype == torch.float32
    expected = flux.transformer.state_dict()
    assert all(torch.equal(v, expected[k].to(torch.bfloat16)) for k, v in single.transformer.state_dict().items())
    assert set(flux.parts) == {"transformer", "text_encoder", "text_encoder_2", "vae"}


def test_load_errors_say_what_to_do(tmp_path, tiny_flux_paths):
    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.flux import FluxDev1

    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache"):
        FluxDev1.load(str(tiny_flux_paths.single_file), offline=True, cache_dir=str(tmp_path))
    bad = tmp_path / "sd.safetensors"
    from safetensors.torch import save_file

    save_file({"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(1)}, str(bad))
    with pytest.raises(ModelLoadError, match="Could not load base model .*time_in.*Flux.1 transformer"):
        FluxDev1.load(str(bad), offline=True, config_dir=str(tiny_flux_paths.diffusers_dir))


def test_flow_contract(flux):
    from ot_gradio.models.flux import latent_image_ids, pack_latents, unpack_latents

    x = torch.randn(2, 16, 6, 10)
    tokens = pack_latents(x)
    assert tokens.shape == (2, 15, 64) and torch.equal(unpack_latents(tokens, 6, 10), x)
    assert torch.equal(tokens[0, 1], x[0, :, 0:2, 2:4].reshape(-1))  # token 1 = the second patch of row 0
    assert latent_image_ids(6, 10, "cpu", torch.float32)[6].tolist() == [0.0, 1.0, 1.0]
    assert flux.image_seq_len(x) == 15 and flux.schedule_kind == "flow_matching"
    with pytest.raises(ValueError, match="force_v_prediction"):
        flux.configure_noise_schedule(prediction_type="v_prediction")
    with pytest.raises(ValueError, match="zero_terminal_snr"):
        flux.configure_noise_schedule(zero_terminal_snr=True)

    pixels = torch.rand(1, 3, 64, 64) * 2 - 1
    mean = flux.vae.encode(pixels).latent_dist.mean
    latents = flux.encode_images(pixels, sample=False)
    cfg = flux.vae.config
    assert torch.allclose(latents, (mean - cfg.shift_factor) * cfg.scaling_factor)
    assert flux.decode_latents(latents).shape == (1, 3, 64, 64)

    cond = flux.encode_text({"text_encoder": ["a red cube"], "text_encoder_2": ["a red cube"]})
    assert cond["encoder_hidden_states"].shape == (1, 512, 64) and cond["pooled_projections"].shape == (1, 64)
    t = torch.tensor([0.7])
    with torch.no_grad():
        v = flux.predict(latents, t, cond)
        flux.guidance_scale = 4.0
        v4 = flux.predict(latents, t, cond)
        flux.guidance_scale = 1.0
    assert v.shape == latents.shape and not torch.allclose(v, v4)  # the guidance embedding is fed


def test_configure_flow_reads_guidance_and_t5_window(fresh):
    from ot_gradio.config.schema import TrainConfig

    cfg = TrainConfig()
    cfg.transformer.guidance_scale = 3.5
    cfg.text_encoder_2_sequence_length = 24
    fresh.configure_flow(cfg)
    assert fresh.guidance_scale == 3.5 and fresh.tokenizer_2.model_max_length == 24
    assert fresh.encode_text(["x"])["encoder_hidden_states"].shape[1] == 24
    cfg.text_encoder_2_sequence_length = None
    fresh.configure_flow(cfg)
    assert fresh.t5_sequence_length == 512


def test_attention_mask_zeroes_t5_padding_in_training_and_samples(fresh, tmp_path):
    from tests.models.family_checks import assert_padding_mask_reaches_training_and_samples

    fresh.t5_sequence_length = 32  # a short window with padding: configure_flow sets it back per run
    prompts = ["a red cube", "a small red cube on a table"]
    off = fresh.encode_text(prompts)
    fresh.mask_padding_tokens = True
    on = fresh.encode_text(prompts)
    mask = fresh._tokens("text_encoder_2", prompts, 32)[1]
    assert 0 < int(mask[0].sum()) < int(mask[1].sum()) < 32
    torch.testing.assert_close(on["encoder_hidden_states"], off["encoder_hidden_states"] * mask[:, :, None])
    assert not off["encoder_hidden_states"][0, int(mask[0].sum()):].eq(0).all()  # T5 gives padding a value of its own
    torch.testing.assert_close(on["pooled_projections"], off["pooled_projections"])  # CLIP-L's pooled output is not masked
    fresh.mask_padding_tokens = False
    assert_padding_mask_reaches_training_and_samples(fresh, (1, 16, 8, 8), tmp_path)


def test_sample_matches_the_pipeline_and_restores_parts(flux):
    flux.transformer.train()
    a = flux.sample("a red cube", height=48, width=64, steps=2, cfg_scale=3.5, seed=1)
    b = flux.sample("a red cube", height=48, width=64, steps=2, cfg_scale=3.5, seed=1)
    c = flux.sample("a red cube", height=48, width=64, steps=2, cfg_scale=1.0, seed=1)
    assert a.size == (64, 48) and a.tobytes() == b.tobytes() and a.tobytes() != c.tobytes()
    assert flux.transformer.training
    flux.transformer.eval()


def test_saves_diffusers_folder_and_bfl_transformer(flux, tmp_path):
    from diffusers import FluxPipeline
    from safetensors.torch import load_file

    from ot_gradio.models.flux import FluxDev1
    from ot_gradio.models.flux_keys import from_bfl

    folder = flux.save_diffusers(tmp_path / "out", torch.float16)
    assert load_file(str(folder / "transformer" / "diffusion_pytorch_model.safetensors"))["x_embedder.weight"].dtype == torch.float16
    pipe = FluxPipeline.from_pretrained(folder, local_files_only=True)
    for part in ("transformer", "text_encoder_2"):
        _same_weights(getattr(pipe, part), getattr(flux, part), torch.float16)

    path = flux.save_single_file(tmp_path / "flux.safetensors", None)
    bfl = load_file(str(path))
    h = 64
    assert bfl["double_blocks.0.img_attn.qkv.weight"].shape == (3 * h, h)
    assert torch.equal(bfl["double_blocks.0.img_attn.qkv.weight"][h : 2 * h], flux.transformer.transformer_blocks[0].attn.to_k.weight)
    assert torch.equal(bfl["single_blocks.0.linear1.weight"][3 * h :], flux.transformer.single_transformer_blocks[0].proj_mlp.weight)
    shift, scale = bfl["final_layer.adaLN_modulation.1.weight"].chunk(2)
    assert torch.equal(scale, flux.transformer.norm_out.linear.weight[:h])
    assert {"img_in.weight", "txt_in.weight", "guidance_in.in_layer.weight", "vector_in.out_layer.bias"} <= set(bfl)
    back = from_bfl(flux.transformer, bfl)
    assert all(torch.equal(back[k], v) for k, v in flux.transformer.state_dict().items())
    reloaded = FluxDev1.load(str(path), offline=True, config_dir=str(folder))
    _same_weights(reloaded.transformer, flux.transformer)


def _flux_lora(model, preset="full"):
    from ot_gradio.training.lora import add_lora

    presets = model.lora_layer_presets
    add_lora(model.transformer, kind="unet", rank=2, alpha=1.0, dropout=0.0, layer_preset=preset, presets=presets["transformer"])
    add_lora(model.text_encoder, kind="text_encoder", rank=2, alpha=1.0, dropout=0.0, layer_preset="full", presets=presets["text_encoder"])
    torch.manual_seed(0)
    for module in (model.transformer, model.text_encoder):
        for name, p in module.named_parameters():
            if p.requires_grad and "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
    return {"transformer": model.transformer, "text_encoder": model.text_encoder}


def test_lora_presets(flux):
    from ot_gradio.training.lora import select_lora_targets

    presets = flux.lora_layer_presets["transformer"]
    attn = select_lora_targets(flux.transformer, kind="unet", layer_preset="attn-only", presets=presets)
    assert "transformer_blocks.0.attn.add_k_proj" in attn and "single_transformer_blocks.0.attn.to_q" in attn
    assert all(".attn." in n for n in attn)
    mlp = select_lora_targets(flux.transformer, kind="unet", layer_preset="attn-mlp", presets=presets)
    assert set(mlp) - set(attn) == {"transformer_blocks.0.ff.net.0.proj", "transformer_blocks.0.ff.net.2", "single_transformer_blocks.0.proj_mlp"}
    blocks = select_lora_targets(flux.transformer, kind="unet", layer_preset="blocks", presets=presets)
    assert "x_embedder" not in blocks and "single_transformer_blocks.0.proj_out" in blocks


def test_diffusers_lora_loads_into_flux_pipeline_and_maps_to_comfyui(fresh, flux, tmp_path):
    from safetensors import safe_open

    from ot_gradio.models.flux_keys import bfl_module_layout, comfy_lora_targets, to_bfl
    from ot_gradio.training.lora_format import DIFFUSERS, KOHYA, load_lora_file, save_lora

    parts = _flux_lora(fresh)
    path = save_lora(tmp_path / "flux.safetensors", parts, base_model_version=fresh.lora_base_model_version, lora_format=DIFFUSERS)
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
        tensors = {k: f.get_tensor(k) for k in keys}

    pipe = flux.pipeline()
    inputs = dict(prompt="a red cube", height=32, width=32, num_inference_steps=2, guidance_scale=3.5, output_type="np",
                  max_sequence_length=32)
    before = pipe(**inputs, generator=torch.Generator().manual_seed(0)).images
    records: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    loggers = [logging.getLogger(n) for n in ("diffusers", "peft")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        pipe.load_lora_weights(str(path), adapter_name="ours")
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    assert not [r for r in records if "unexpected key" in r.lower() or "not loaded" in r.lower()], records
    after = pipe(**inputs, generator=torch.Generator().manual_seed(0)).images
    assert abs(after - before).max() > 1e-3
    pipe.unload_lora_weights()

    # ComfyUI: `transformer.<diffusers path>` -> a BFL weight (rows of the fused qkv / linear1)
    transformer_keys = [k for k in keys if k.startswith("transformer.")]
    targets = comfy_lora_targets(flux.transformer, transformer_keys)
    assert len(targets) == len(bfl_module_layout(flux.transformer)) - 6  # every Linear; the 6 RMS norms carry no LoRA
    bfl = to_bfl(flux.transformer, flux.transformer.state_dict())
    for layer, place in targets.items():
        down, up = tensors[f"{layer}.lora_A.weight"], tensors[f"{layer}.lora_B.weight"]
        target = bfl[place.key]
        assert down.shape[1] == target.shape[1], layer
        assert up.shape[0] == (place.rows if place.start is not None else target.shape[0]), layer
    assert targets["transformer.single_transformer_blocks.0.proj_mlp"].key == "single_blocks.0.linear1.weight"

    kohya = save_lora(tmp_path / "k.safetensors", parts, base_model_version=fresh.lora_base_model_version, lora_format=KOHYA)
    with safe_open(str(kohya), "pt") as f:
        kkeys = [k for k in f.keys() if k.startswith("lora_transformer_")]
        assert f.metadata()["ss_base_model_version"] == "flux1"
    assert {p.key for p in comfy_lora_targets(flux.transformer, kkeys).values()} == {p.key for p in targets.values()}
    loaded = load_lora_file(kohya)  # kohya names read back to the same module paths
    assert set(loaded.parts["transformer"]) == {k.removeprefix("transformer.") for k in transformer_keys}


@pytest.fixture(scope="session")
def chroma(tiny_dir):
    from ot_gradio.models.chroma import Chroma1

    return Chroma1.load("tiny:chroma", offline=True)


def test_chroma_masks_t5_padding_and_samples_with_real_cfg(chroma, tmp_path):
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.models.common import ModelLoadError

    cfg = TrainConfig()
    cfg.text_encoder_sequence_length = 16
    chroma.configure_flow(cfg)
    cond = chroma.encode_text(["ab"])  # 2 characters + </s> = 3 tokens, then padding
    assert cond["encoder_hidden_states"].shape == (1, 16, 64) and cond["text_mask"][0].tolist() == [True] * 4 + [False] * 12
    assert set(chroma.parts) == {"transformer", "text_encoder", "vae"}
    latents = torch.randn(1, 16, 4, 4)
    with torch.no_grad():
        v = chroma.predict(latents, torch.tensor([0.5]), cond)
        padded = dict(cond, encoder_hidden_states=cond["encoder_hidden_states"].clone())
        padded["encoder_hidden_states"][:, 5:] += 1.0  # masked padding does not change the prediction
        assert torch.allclose(chroma.predict(latents, torch.tensor([0.5]), padded), v, atol=1e-5)
    a = chroma.sample("a red cube", "blurry", height=64, width=64, steps=2, cfg_scale=4.0, seed=1)
    b = chroma.sample("a red cube", "", height=64, width=64, steps=2, cfg_scale=4.0, seed=1)
    assert a.size == (64, 64) and a.tobytes() != b.tobytes()  # the negative prompt is used
    (tmp_path / "c.safetensors").write_bytes(b"0")
    with pytest.raises(ModelLoadError, match="config folder .* is not a diffusers model"):  # Chroma's own file needs the other parts
        type(chroma).load(str(tmp_path / "c.safetensors"), config_dir=str(tmp_path))
    cfg.text_encoder_sequence_length = None
    chroma.configure_flow(cfg)


def test_chroma_lora_loads_into_chroma_pipeline(chroma, tmp_path):
    from ot_gradio.models.chroma import Chroma1
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_format import DIFFUSERS, save_lora

    model = Chroma1.load("tiny:chroma", offline=True)
    add_lora(model.transformer, kind="unet", rank=2, alpha=1.0, dropout=0.0, layer_preset="attn-mlp",
             presets=model.lora_layer_presets["transformer"])
    torch.manual_seed(0)
    for name, p in model.transformer.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    path = save_lora(tmp_path / "c.safetensors", {"transformer": model.transformer}, lora_format=DIFFUSERS,
                     base_model_version=model.lora_base_model_version)
    pipe = chroma.pipeline()
    kw = dict(prompt="a red cube", negative_prompt="", height=32, width=32, num_inference_steps=2, guidance_scale=4.0,
              output_type="np", max_sequence_length=16)
    before = pipe(**kw, generator=torch.Generator().manual_seed(0)).images
    pipe.load_lora_weights(str(path))
    after = pipe(**kw, generator=torch.Generator().manual_seed(0)).images
    pipe.unload_lora_weights()
    assert abs(after - before).max() > 1e-3
