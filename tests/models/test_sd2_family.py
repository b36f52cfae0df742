"""The SD 2.x families on the tiny SD 2: the 768 v-prediction and the 512 epsilon ("base") types."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.enums import ModelType, NoiseScheduler, native_resolution
from ot_gradio.config.families import family_info, supports
from ot_gradio.models.registry import get_family
from ot_gradio.models.sd2 import StableDiffusion20, StableDiffusion20Base, StableDiffusion21, StableDiffusion21Base
from tests.models.family_checks import family_fixtures

V_TYPES = (ModelType.STABLE_DIFFUSION_20, ModelType.STABLE_DIFFUSION_21)
BASE_TYPES = (ModelType.STABLE_DIFFUSION_20_BASE, ModelType.STABLE_DIFFUSION_21_BASE)


@pytest.fixture(scope="session")
def sd2_base_paths(tiny_dir):
    from ot_gradio.models.tiny import resolve_tiny

    return resolve_tiny("tiny:sd2-base")


sd2_paths, sd2 = family_fixtures("sd2", StableDiffusion21, "sd2_paths", "sd2", scope="session")


def _same_weights(a, b) -> bool:
    return all(
        a.parts[p].state_dict().keys() == b.parts[p].state_dict().keys()
        and all(torch.equal(v, b.parts[p].state_dict()[k]) for k, v in a.parts[p].state_dict().items())
        for p in a.parts
    )


# ------------------------------------------------------------------ the types


@pytest.mark.parametrize(
    "model_type, cls, repo, resolution, prediction",
    [
        (ModelType.STABLE_DIFFUSION_20, StableDiffusion20, "stabilityai/stable-diffusion-2", 768, "v_prediction"),
        (ModelType.STABLE_DIFFUSION_20_BASE, StableDiffusion20Base, "stabilityai/stable-diffusion-2-base", 512, "epsilon"),
        (ModelType.STABLE_DIFFUSION_21, StableDiffusion21, "stabilityai/stable-diffusion-2-1", 768, "v_prediction"),
        (ModelType.STABLE_DIFFUSION_21_BASE, StableDiffusion21Base, "stabilityai/stable-diffusion-2-1-base", 512, "epsilon"),
    ],
)
def test_each_type_is_registered_and_implemented(model_type, cls, repo, resolution, prediction):
    assert get_family(model_type) is cls and cls.model_type == model_type
    assert cls.default_config_repo == repo and native_resolution(model_type) == resolution
    assert cls.single_file_prediction_type == prediction
    info = family_info(model_type)
    assert info.implemented and info.parts == ("unet", "text_encoder", "vae") and supports(model_type, "LORA")


def test_tiny_sd2_models(sd2, sd2_base_paths):
    assert sd2.prediction_type == "v_prediction"
    assert sd2.text_encoder.config.hidden_act == "gelu"  # OpenCLIP, not OpenAI CLIP
    assert sd2.unet.config.use_linear_projection
    base = StableDiffusion21Base.load(str(sd2_base_paths.diffusers_dir), offline=True)  # by name: test_families.py
    assert base.prediction_type == "epsilon"


def test_lora_version_and_modelspec_follow_the_prediction_type(sd2_paths):
    model = StableDiffusion20.load(str(sd2_paths.diffusers_dir), offline=True)
    assert (model.lora_base_model_version, model.modelspec_architecture) == ("sd_v2_v", "stable-diffusion-v2-768-v")
    model.configure_noise_schedule(prediction_type="epsilon")  # force_epsilon_prediction
    assert (model.lora_base_model_version, model.modelspec_architecture) == ("sd_v2", "stable-diffusion-v2-512")


# ------------------------------------------------------------------ single files


def test_each_sd2_type_names_its_single_files_prediction_type():
    assert {get_family(m).single_file_prediction_type for m in V_TYPES} == {"v_prediction"}
    assert {get_family(m).single_file_prediction_type for m in BASE_TYPES} == {"epsilon"}


# one type of each kind loads a file (a single-file load takes ~10 s here; the others share the code)
@pytest.mark.parametrize("model_type", [V_TYPES[0], BASE_TYPES[0]])
def test_single_file_prediction_type_comes_from_the_model_type(model_type, sd2_paths, sd2_base_paths, sd2):
    """A single file has no scheduler config: a 768 type loads it as v-prediction even with the
    configs of an epsilon model, a base type as epsilon even with a v model's configs."""
    cls = get_family(model_type)
    expected = cls.single_file_prediction_type
    other_configs = sd2_base_paths if expected == "v_prediction" else sd2_paths
    model = cls.load(str(sd2_paths.single_file), offline=True, config_dir=str(other_configs.diffusers_dir))
    assert model.prediction_type == expected
    assert model.scheduler.config.prediction_type == expected  # samplers are built from it
    assert _same_weights(model, sd2)


def test_diffusers_alone_takes_the_config_repos_scheduler(sd2_paths, sd2_base_paths):
    """Why the model type must decide: diffusers gives a single file the prediction type of
    whatever config repo it is loaded with (and, with none, assumes every SD 2 file is the
    768 v model), so a v file loaded with a base model's configs would train as epsilon."""
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_single_file(
        str(sd2_paths.single_file), config=str(sd2_base_paths.diffusers_dir), local_files_only=True, safety_checker=None
    )
    assert pipe.scheduler.config.prediction_type == "epsilon"


def test_save_single_file_reloads_with_sd2_names(sd2, sd2_paths, tmp_path):
    path = sd2.save_single_file(tmp_path / "sd2.safetensors", dtype="FLOAT_32")
    with safe_open(str(path), "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
    assert "cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight" in keys
    assert meta["modelspec.architecture"] == "stable-diffusion-v2-768-v" and meta["ot_gradio.model_type"] == "STABLE_DIFFUSION_21"
    reloaded = StableDiffusion21.load(str(path), offline=True, config_dir=str(sd2_paths.diffusers_dir))
    assert _same_weights(sd2, reloaded) and reloaded.prediction_type == "v_prediction"


def test_save_diffusers_keeps_v_prediction(sd2, tmp_path):
    sd2.save_diffusers(tmp_path / "out", "FLOAT_32")
    reloaded = StableDiffusion21.load(str(tmp_path / "out"), offline=True)
    assert _same_weights(sd2, reloaded) and reloaded.prediction_type == "v_prediction"


# ------------------------------------------------------------------ training pieces and sampling


def test_encode_predict_and_v_target(sd2):
    hidden = sd2.encode_text(["a photo of a cat", "dog"])["encoder_hidden_states"]
    assert hidden.shape == (2, 77, sd2.text_encoder.config.hidden_size)
    # the diffusers SD 2 text encoder already ends at OpenCLIP's penultimate layer: its last
    # hidden state goes through the final layer norm, which is what the UNet gets
    ids = sd2.tokenize(["a photo of a cat", "dog"])
    out = sd2.text_encoder(ids, output_hidden_states=True)
    assert torch.allclose(hidden, sd2.text_encoder.final_layer_norm(out.hidden_states[-1]), atol=1e-6)

    latents = sd2.encode_images(torch.rand(2, 3, 64, 48) * 2 - 1)
    noise, timesteps = torch.randn_like(latents), torch.tensor([10, 900])
    noisy = sd2.add_noise(latents, noise, timesteps)
    assert sd2.predict(noisy, timesteps, {"encoder_hidden_states": hidden}).shape == latents.shape
    target = sd2.prediction_target(latents, noise, timesteps)
    alpha = sd2.noise_scheduler.alphas_cumprod[timesteps].view(-1, 1, 1, 1)
    assert torch.allclose(target, alpha.sqrt() * noise - (1 - alpha).sqrt() * latents, atol=1e-5)


@pytest.mark.parametrize("sampler", [NoiseScheduler.DDIM, NoiseScheduler.EULER_A, NoiseScheduler.DPMPP_KARRAS])
def test_sample_size_and_seed(sd2, sampler):
    a = sd2.sample("a cat", height=64, width=40, steps=2, seed=5, sampler=sampler)
    b = sd2.sample("a cat", height=64, width=40, steps=2, seed=5, sampler=sampler)
    assert a.size == (40, 64) and a.tobytes() == b.tobytes()


def test_sampler_predicts_v(sd2):
    pipe = sd2.pipeline(NoiseScheduler.EULER)
    assert pipe.scheduler.config.prediction_type == "v_prediction"


def test_kohya_lora_metadata_marks_sd2_and_v(sd2_paths, tmp_path):
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_format import read_lora_metadata, save_lora

    model = StableDiffusion20.load(str(sd2_paths.diffusers_dir), offline=True)
    add_lora(model.unet, kind="unet", rank=2, alpha=2, dropout=0.0, layer_preset="attn-only")
    path = save_lora(tmp_path / "v.safetensors", {"unet": model.unet}, base_model_version=model.lora_base_model_version)
    meta = read_lora_metadata(path)
    assert meta["ss_base_model_version"] == "sd_v2_v" and meta["ss_v2"] == "True" and meta["ss_v_parameterization"] == "True"

    model.configure_noise_schedule(prediction_type="epsilon")
    path = save_lora(tmp_path / "eps.safetensors", {"unet": model.unet}, base_model_version=model.lora_base_model_version)
    meta = read_lora_metadata(path)
    assert meta["ss_base_model_version"] == "sd_v2" and meta["ss_v2"] == "True" and "ss_v_parameterization" not in meta
