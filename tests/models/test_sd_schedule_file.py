"""The noise schedule in and beside an SD single file, as OneTrainer writes it: the ldm schedule
buffers (`betas`, `alphas_cumprod`, ...) in the checkpoint and the LDM config `<stem>.yaml`
beside it (`parameterization: v` for v-prediction), which A1111/Forge read; and the reverse, a
OneTrainer v-prediction / zero-terminal-SNR file loading with its schedule."""

from __future__ import annotations

import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ot_gradio.config.enums import DataType
from ot_gradio.models.ldm_config import ldm_config, read_parameterization
from ot_gradio.models.schedule_markers import SCHEDULE_KEYS, schedule_buffers, zero_terminal_snr
from ot_gradio.models.sd15 import StableDiffusion15
from ot_gradio.models.sdxl import StableDiffusionXL
from tests.models.family_checks import family_fixtures

sd2_paths, _ = family_fixtures("sd2", StableDiffusion15, "sd2_paths", "_unused_sd2", scope="session")
tiny_sdxl_paths, _ = family_fixtures("sdxl", StableDiffusionXL, "tiny_sdxl_paths", "_unused_sdxl")


def _tensors(path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def _params(path) -> dict:
    return yaml.safe_load(path.with_suffix(".yaml").read_text(encoding="utf-8"))["model"]["params"]


def _same_weights(a, b) -> bool:
    return all(torch.equal(v, b.parts[p].state_dict()[k]) for p in a.parts for k, v in a.parts[p].state_dict().items())


@pytest.fixture(scope="module")
def v_ztsnr(tiny_sd15_paths, tmp_path_factory):
    """The tiny SD 1.5 trained as v-prediction on the zero-terminal-SNR schedule (force_v_prediction,
    rescale_noise_scheduler_to_zero_terminal_snr), and its single file."""
    model = StableDiffusion15.load(str(tiny_sd15_paths.diffusers_dir), offline=True)
    model.configure_noise_schedule(prediction_type="v_prediction", zero_terminal_snr=True)
    path = model.save_single_file(tmp_path_factory.mktemp("vz") / "vz.safetensors", DataType.FLOAT_32)
    return model, path


def test_v_ztsnr_file_holds_the_schedule_and_a_v_yaml(v_ztsnr):
    model, path = v_ztsnr
    tensors = _tensors(path)
    assert set(SCHEDULE_KEYS) <= set(tensors)
    assert torch.equal(tensors["betas"], model.noise_scheduler.betas.float())
    assert torch.equal(tensors["alphas_cumprod"], model.noise_scheduler.alphas_cumprod.float())
    assert tensors["alphas_cumprod"][-1].item() == 0.0  # zero terminal SNR
    assert tensors["sqrt_alphas_cumprod"][-1].item() == 0.0 and tensors["alphas_cumprod_prev"][0].item() == 1.0
    params = _params(path)
    assert params["parameterization"] == "v"
    assert params["unet_config"]["params"]["context_dim"] == 768
    assert params["cond_stage_config"]["target"] == "ldm.modules.encoders.modules.FrozenCLIPEmbedder"
    assert not list(path.parent.glob(".*.tmp"))  # both written atomically


def test_v_ztsnr_file_loads_back_with_its_schedule(v_ztsnr, tiny_sd15_paths):
    model, path = v_ztsnr
    loaded = StableDiffusion15.load(str(path), offline=True, config_dir=str(tiny_sd15_paths.diffusers_dir))
    assert loaded.prediction_type == "v_prediction" and loaded.noise_scheduler.config.rescale_betas_zero_snr
    assert torch.equal(loaded.noise_scheduler.alphas_cumprod, model.noise_scheduler.alphas_cumprod)
    assert loaded.scheduler.config.timestep_spacing == "trailing"  # samplers get it too
    assert loaded.pipeline("EULER").scheduler.config.prediction_type == "v_prediction"
    assert _same_weights(model, loaded)


def test_buffers_alone_say_zero_terminal_snr_and_the_yaml_alone_says_v(v_ztsnr, tiny_sd15_paths, tmp_path):
    """Without its yaml, a file whose alphas_cumprod ends at 0 loads as v-prediction on that
    schedule (OneTrainer always trains v with it); a OneTrainer v file without those buffers
    (or our older files) gets v-prediction on the standard schedule from its yaml."""
    _, path = v_ztsnr
    bare = tmp_path / "bare.safetensors"
    save_file(load_file(str(path)), str(bare))
    loaded = StableDiffusion15.load(str(bare), offline=True, config_dir=str(tiny_sd15_paths.diffusers_dir))
    assert loaded.prediction_type == "v_prediction" and loaded.noise_scheduler.alphas_cumprod[-1].item() == 0.0

    v_only = tmp_path / "onetrainer-v.safetensors"
    save_file(load_file(str(tiny_sd15_paths.single_file)), str(v_only))
    config = ldm_config(1, 4, "v_prediction")
    v_only.with_suffix(".yml").write_text(yaml.safe_dump(config), encoding="utf-8")  # OneTrainer reads .yml too
    loaded = StableDiffusion15.load(str(v_only), offline=True, config_dir=str(tiny_sd15_paths.diffusers_dir))
    assert loaded.prediction_type == "v_prediction" and not loaded.noise_scheduler.config.rescale_betas_zero_snr
    assert loaded.noise_scheduler.alphas_cumprod[-1].item() > 1e-3


def test_diffusers_from_single_file_loads_a_file_with_the_buffers(v_ztsnr, tiny_sd15_paths, library_warnings):
    from diffusers import StableDiffusionPipeline

    model, path = v_ztsnr
    assert "alphas_cumprod" in _tensors(path)
    pipe = StableDiffusionPipeline.from_single_file(str(path), config=str(tiny_sd15_paths.diffusers_dir),
                                                    local_files_only=True, safety_checker=None)
    assert all(torch.equal(v, pipe.unet.state_dict()[k]) for k, v in model.unet.state_dict().items())
    assert not [m for m in library_warnings if "alphas_cumprod" in m or "betas" in m]


def test_epsilon_file_says_eps_and_loads_as_before(sd15, tiny_sd15_paths, tmp_path):
    path = sd15.save_single_file(tmp_path / "eps.safetensors", DataType.FLOAT_16)
    tensors = _tensors(path)
    assert tensors["alphas_cumprod"].dtype == torch.float32  # not cast to the output type
    assert torch.equal(tensors["alphas_cumprod"], sd15.noise_scheduler.alphas_cumprod.float())
    assert tensors["model.diffusion_model.input_blocks.0.0.weight"].dtype == torch.float16
    assert _params(path)["parameterization"] == "eps" and read_parameterization(path) == "epsilon"
    assert not zero_terminal_snr(path)
    loaded = StableDiffusion15.load(str(path), offline=True, config_dir=str(tiny_sd15_paths.diffusers_dir))
    assert loaded.prediction_type == "epsilon" and not loaded.noise_scheduler.config.rescale_betas_zero_snr
    assert loaded.scheduler.config == sd15.scheduler.config


def test_the_yaml_overrides_the_sd2_model_types_default(sd2_paths, tmp_path):
    """A OneTrainer SD 2.1-base file trained with force_v_prediction, its yaml saying v, loads as v
    (it trained as epsilon, the base type's default); an SD 2.1 (768 v) file whose yaml says
    "epsilon" (OneTrainer's force_epsilon_prediction) loads as epsilon."""
    from ot_gradio.models.sd2 import StableDiffusion21, StableDiffusion21Base

    path = tmp_path / "sd2.safetensors"
    save_file(load_file(str(sd2_paths.single_file)), str(path))
    path.with_suffix(".yaml").write_text(yaml.safe_dump(ldm_config(2, 4, "v_prediction")), encoding="utf-8")
    assert StableDiffusion21Base.load(str(path), offline=True, config_dir=str(sd2_paths.diffusers_dir)).prediction_type == "v_prediction"
    config = ldm_config(2, 4, "epsilon")
    config["model"]["params"]["parameterization"] = "epsilon"
    path.with_suffix(".yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert StableDiffusion21.load(str(path), offline=True, config_dir=str(sd2_paths.diffusers_dir)).prediction_type == "epsilon"


def test_sd2_v_files_yaml_is_v2_inference_v(tmp_path):
    """The keys A1111 builds an SD 2 model from (v2-inference-v.yaml), and the inpainting and depth kinds."""
    params = ldm_config(2, 4, "v_prediction")["model"]["params"]
    assert params["parameterization"] == "v" and params["conditioning_key"] == "crossattn"
    unet = params["unet_config"]["params"]
    assert (unet["context_dim"], unet["num_head_channels"], unet["use_linear_in_transformer"]) == (1024, 64, True)
    assert params["cond_stage_config"] == {"target": "ldm.modules.encoders.modules.FrozenOpenCLIPEmbedder",
                                           "params": {"freeze": True, "layer": "penultimate"}}
    inpaint = ldm_config(1, 9, "epsilon")["model"]
    assert inpaint["target"].endswith("LatentInpaintDiffusion") and inpaint["params"]["conditioning_key"] == "hybrid"
    assert inpaint["params"]["unet_config"]["params"]["in_channels"] == 9
    depth = ldm_config(2, 5, "epsilon")["model"]
    assert depth["target"].endswith("LatentDepth2ImageDiffusion") and "depth_stage_config" in depth["params"]
    assert "use_fp16" not in depth["params"]["unet_config"]["params"] and ldm_config(1, 8, "epsilon") is None


def test_schedule_buffers_match_the_standard_sd_schedule():
    """ldm's register_schedule values for linear_start 0.00085, linear_end 0.012 ("scaled_linear")."""
    from diffusers import DDPMScheduler

    scheduler = DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")
    b = schedule_buffers(scheduler)
    betas = torch.linspace(0.00085**0.5, 0.012**0.5, 1000, dtype=torch.float64) ** 2
    alpha_bar = torch.cumprod(1 - betas, 0)
    assert torch.allclose(b["alphas_cumprod"].double(), alpha_bar, rtol=1e-5)
    assert torch.allclose(b["sqrt_recipm1_alphas_cumprod"].double(), (1 / alpha_bar - 1).sqrt(), rtol=1e-4)
    assert all(v.dtype == torch.float32 and v.shape == (1000,) for v in b.values())


def test_sdxl_file_holds_the_buffers_and_a_onetrainer_ztsnr_file_loads_so(tiny_sdxl_paths, tmp_path):
    """OneTrainer's SDXL file holds the buffers and `v_pred`, no `ztsnr` marker: its zero-terminal
    -SNR schedule comes from alphas_cumprod."""
    model = StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir), offline=True)
    model.configure_noise_schedule(prediction_type="v_prediction", zero_terminal_snr=True)
    path = model.save_single_file(tmp_path / "xl.safetensors", DataType.FLOAT_32)
    tensors = _tensors(path)
    assert set(SCHEDULE_KEYS) <= set(tensors) and tensors["alphas_cumprod"][-1].item() == 0.0
    onetrainer = tmp_path / "onetrainer-xl.safetensors"
    save_file({k: v for k, v in tensors.items() if k != "ztsnr"}, str(onetrainer))
    loaded = StableDiffusionXL.load(str(onetrainer), offline=True, config_dir=str(tiny_sdxl_paths.diffusers_dir))
    assert loaded.prediction_type == "v_prediction" and loaded.noise_scheduler.alphas_cumprod[-1].item() == 0.0


def test_a_save_without_an_ldm_config_removes_an_earlier_yaml(sd15, tmp_path, monkeypatch):
    """A UNet ldm_config has no template for: an earlier save's yaml at the path must not outlive it
    (a loader would read its parameterization)."""
    path = sd15.save_single_file(tmp_path / "m.safetensors", DataType.FLOAT_32)
    assert (tmp_path / "m.yaml").is_file()
    monkeypatch.setattr(type(sd15), "single_file_extras", lambda self: {"schedule": schedule_buffers(self.noise_scheduler), "config": None})
    sd15.save_single_file(path, DataType.FLOAT_32)
    assert not (tmp_path / "m.yaml").exists() and path.is_file()
