"""The SD 1.5 family on the tiny model: loading, encoding, prediction, sampling, saving."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.enums import NoiseScheduler
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.sd15 import StableDiffusion15


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k].to(sa[k].dtype)) for k in sa)


def _same_model(a: StableDiffusion15, b: StableDiffusion15) -> bool:
    return all(_same_weights(a.parts[p], b.parts[p]) for p in a.parts)


# ------------------------------------------------------------------ loading


def test_load_single_file_with_local_config_takes_ddpm(tiny_sd15_paths):
    """Its weights, and loading by name and by folder: tests/models/test_families.py."""
    loaded = StableDiffusion15.load(
        str(tiny_sd15_paths.single_file), offline=True, config_dir=str(tiny_sd15_paths.diffusers_dir)
    )
    assert type(loaded.noise_scheduler).__name__ == "DDPMScheduler"


def test_dtypes_per_part(tiny_sd15_paths):
    model = StableDiffusion15.load(
        str(tiny_sd15_paths.diffusers_dir), offline=True, dtypes={"unet": torch.bfloat16, "text_encoder": torch.float16}
    )
    assert next(model.unet.parameters()).dtype == torch.bfloat16
    assert next(model.text_encoder.parameters()).dtype == torch.float16
    assert next(model.vae.parameters()).dtype == torch.float32


@pytest.mark.parametrize("name", ["/no/such/folder", "missing-model.safetensors", "./relative/missing"])
def test_missing_path_is_a_clear_error(name):
    with pytest.raises(ModelLoadError, match="not found") as info:
        StableDiffusion15.load(name, offline=True)
    assert name in str(info.value)


def test_offline_hub_id_not_in_cache(tmp_path):
    with pytest.raises(ModelLoadError) as info:
        StableDiffusion15.load("someone/not-cached-model", offline=True, cache_dir=str(tmp_path))
    message = str(info.value)
    assert "someone/not-cached-model" in message and "offline" in message


def test_offline_single_file_without_config_asks_for_one(tiny_sd15_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelLoadError, match="config folder"):
        StableDiffusion15.load(str(tiny_sd15_paths.single_file), offline=True, cache_dir=str(tmp_path))


def test_empty_name():
    with pytest.raises(ModelLoadError, match="No base model"):
        StableDiffusion15.load("  ", offline=True)


# ------------------------------------------------------------------ training pieces


def test_encode_and_predict_shapes(sd15):
    ids = sd15.tokenize(["a photo of a cat", "dog"])
    assert ids.shape == (2, sd15.tokenizer.model_max_length)
    hidden = sd15.encode_prompt(ids)
    assert hidden.shape == (2, 77, sd15.text_encoder.config.hidden_size)
    skipped = sd15.encode_prompt(ids, layer_skip=1)
    assert skipped.shape == hidden.shape and not torch.equal(skipped, hidden)

    pixels = torch.rand(2, 3, 64, 48) * 2 - 1
    latents = sd15.encode_images(pixels)
    assert latents.shape == (2, 4, 8, 6) and not latents.requires_grad
    assert torch.equal(sd15.encode_images(pixels, sample=False), sd15.encode_images(pixels, sample=False))
    assert sd15.decode_latents(latents).shape == pixels.shape

    noise = torch.randn_like(latents)
    timesteps = torch.tensor([10, 900])
    noisy = sd15.add_noise(latents, noise, timesteps)
    assert sd15.predict(noisy, timesteps, hidden).shape == latents.shape
    assert sd15.prediction_target(latents, noise, timesteps) is noise


def test_gradients_reach_the_text_encoder(sd15):
    ids = sd15.tokenize("a cat")
    latents = torch.randn(1, 4, 8, 8)
    sd15.text_encoder.requires_grad_(True)
    try:
        out = sd15.predict(latents, torch.tensor([500]), sd15.encode_prompt(ids))
        out.pow(2).mean().backward()
        grad = sd15.text_encoder.get_input_embeddings().weight.grad
        assert grad is not None and grad.abs().sum() > 0
    finally:
        sd15.text_encoder.requires_grad_(False)
        sd15.text_encoder.zero_grad(set_to_none=True)
        sd15.unet.zero_grad(set_to_none=True)


def test_v_prediction_target(tiny_sd15_paths):
    from diffusers import DDPMScheduler

    model = StableDiffusion15.load(str(tiny_sd15_paths.diffusers_dir), offline=True)
    model.noise_scheduler = DDPMScheduler.from_config(model.noise_scheduler.config, prediction_type="v_prediction")
    latents, noise, t = torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8), torch.tensor([300])
    assert torch.allclose(model.prediction_target(latents, noise, t), model.noise_scheduler.get_velocity(latents, noise, t))


# ------------------------------------------------------------------ sampling


@pytest.mark.parametrize("sampler", list(NoiseScheduler))
def test_sample_each_sampler(sd15, sampler):
    sd15.unet.train()
    image = sd15.sample("a cat", "blurry", height=64, width=48, steps=2, cfg_scale=5.0, seed=3, sampler=sampler, device="cpu")
    assert image.size == (48, 64)
    assert sd15.unet.training and not sd15.vae.training  # modes restored
    sd15.unet.eval()


def test_sample_is_seeded_and_any_size(sd15):
    a = sd15.sample("a cat", height=40, width=36, steps=2, seed=7, sampler=NoiseScheduler.EULER)
    b = sd15.sample("a cat", height=40, width=36, steps=2, seed=7, sampler=NoiseScheduler.EULER)
    assert a.size == (36, 40) and a.tobytes() == b.tobytes()


def test_sample_with_a_lora_adapter(tiny_sd15_paths):
    from peft import LoraConfig

    model = StableDiffusion15.load(str(tiny_sd15_paths.diffusers_dir), offline=True)
    model.unet.add_adapter(LoraConfig(r=2, target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
    assert model.sample("a cat", height=32, width=32, steps=2).size == (32, 32)
    with pytest.raises(ValueError, match="LoRA"):
        model.save_single_file(tiny_sd15_paths.diffusers_dir.parent / "never.safetensors", "FLOAT_16")


# ------------------------------------------------------------------ saving


def test_save_diffusers_reloads(sd15, tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "stale.txt").write_text("old")  # replaced as a whole
    sd15.save_diffusers(target, dtype="FLOAT_32")
    assert not (target / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert _same_model(sd15, StableDiffusion15.load(str(target), offline=True))


def test_save_diffusers_half(sd15, tmp_path):
    from safetensors import safe_open

    sd15.save_diffusers(tmp_path / "half", "FLOAT_16")
    with safe_open(str(tmp_path / "half" / "unet" / "diffusion_pytorch_model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    assert next(sd15.unet.parameters()).dtype == torch.float32
    reloaded = StableDiffusion15.load(str(tmp_path / "half"), offline=True)
    assert torch.allclose(reloaded.unet.conv_in.weight, sd15.unet.conv_in.weight, atol=1e-3)


def test_save_single_file_reloads(sd15, tiny_sd15_paths, tmp_path):
    path = sd15.save_single_file(tmp_path / "model.safetensors", dtype="FLOAT_32")
    reloaded = StableDiffusion15.load(str(path), offline=True, config_dir=str(tiny_sd15_paths.diffusers_dir))
    assert _same_model(sd15, reloaded)
