"""Würstchen 2: loading the three models, the EffNet encoder's layout, the training math
(OneTrainer's BaseWuerstchenSetup), sampling, saving and LoRA names."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.models.common import ModelLoadError


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    from ot_gradio.models.tiny import resolve_tiny

    paths = resolve_tiny("tiny:wuerstchen2")
    root = paths.diffusers_dir.parent
    return {"prior": root / "prior", "decoder": root / "decoder", "effnet": root / "effnet"}


@pytest.fixture(scope="module")
def model(tiny):
    from ot_gradio.models.wuerstchen import Wuerstchen2

    return Wuerstchen2.load("tiny:wuerstchen2", offline=True)


# ---------------------------------------------------------------- the EffNet encoder


def test_effnet_backbone_has_torchvision_efficientnet_v2_s_layout():
    """Counts and shapes from torchvision's efficientnet_v2_s: 452 parameter tensors and
    21,458,488 weights, of which the classifier (not part of `features`) holds 2 and 1,281,000."""
    from ot_gradio.models.effnet import EfficientNetEncoder

    with torch.device("meta"):
        encoder = EfficientNetEncoder()
    params = {k: tuple(v.shape) for k, v in encoder.backbone.named_parameters()}
    assert len(params) == 452 - 2
    assert sum(v.numel() for v in encoder.backbone.parameters()) == 21_458_488 - 1_281_000
    assert params["0.0.weight"] == (24, 3, 3, 3)
    assert params["1.0.block.0.0.weight"] == (24, 24, 3, 3)
    assert params["2.0.block.1.0.weight"] == (48, 96, 1, 1)
    assert params["4.0.block.2.fc1.weight"] == (16, 256, 1, 1)
    assert params["5.1.block.2.fc1.weight"] == (40, 960, 1, 1)
    assert params["6.14.block.3.0.weight"] == (256, 1536, 1, 1)
    assert params["7.0.weight"] == (1280, 256, 1, 1)
    keys = set(encoder.state_dict())
    assert {"mapper.0.weight", "mapper.1.weight", "mapper.1.running_var", "backbone.6.14.block.3.1.running_mean"} <= keys


def test_tiny_effnet_has_the_same_tree_as_the_real_one():
    from ot_gradio.models.effnet import V2_S_STAGES, EfficientNetEncoder

    with torch.device("meta"):
        real = EfficientNetEncoder()
        tiny = EfficientNetEncoder(c_cond=32, widths=[8, 8, 8, 16, 16, 16, 32], depths=[s[5] for s in V2_S_STAGES])
    assert set(real.state_dict()) == set(tiny.state_dict())


def test_effnet_file_and_folder_load(tiny, tmp_path):
    from safetensors.torch import save_file

    from ot_gradio.models.cascade_loading import Loader, load_effnet
    from ot_gradio.models.effnet import EfficientNetEncoder

    folder = load_effnet(str(tiny["effnet"]), Loader(None, True, None))
    reference = EfficientNetEncoder.from_pretrained(str(tiny["effnet"]))
    assert torch.equal(folder.backbone[7][0].weight, reference.backbone[7][0].weight)
    state = {k: v for k, v in reference.state_dict().items() if not k.endswith("num_batches_tracked")}
    save_file(state, str(tmp_path / "effnet.safetensors"))
    from_file = load_effnet(str(tmp_path / "effnet.safetensors"), Loader(None, True, None))
    assert from_file.config.widths == reference.config.widths and from_file.config.affine_batch_norm
    x = torch.rand(1, 3, 48, 48)
    assert torch.allclose(from_file.eval()(x), reference.eval()(x))
    save_file({"backbone.0.0.weight": torch.zeros(1)}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ModelLoadError, match="effnet_encoder.model_name"):
        load_effnet(str(tmp_path / "bad.safetensors"), Loader(None, True, None))


# ---------------------------------------------------------------- loading


def test_load_from_folders_honours_the_part_model_names(tiny, tmp_path):
    from ot_gradio.models.tiny.wuerstchen import tiny_effnet
    from ot_gradio.models.wuerstchen import Wuerstchen2

    other = tiny_effnet(seed=7)
    other.save_pretrained(tmp_path / "other-effnet")
    model = Wuerstchen2.load(
        str(tiny["prior"]), offline=True,
        part_models={"decoder": str(tiny["decoder"]), "effnet_encoder": str(tmp_path / "other-effnet"), "decoder_vqgan": ""},
        dtypes={"decoder": torch.bfloat16},
    )
    assert torch.equal(model.effnet_encoder.mapper[0].weight, other.mapper[0].weight)
    assert model.decoder.dtype == torch.bfloat16 and model.prior.dtype == torch.float32
    assert set(model.parts) == {"prior", "text_encoder", "decoder", "decoder_text_encoder", "decoder_vqgan", "effnet_encoder"}
    with pytest.raises(ModelLoadError, match="decoder.model_name"):
        Wuerstchen2.load(str(tiny["prior"]), offline=True)
    with pytest.raises(ModelLoadError, match="base_model_name"):
        Wuerstchen2.load(str(tmp_path / "missing"), offline=True)


def test_family_table_and_registry_agree():
    from ot_gradio.config.enums import ModelType
    from ot_gradio.config.families import family_info, supports
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.wuerstchen import Wuerstchen2

    assert get_family(ModelType.WUERSTCHEN_2) is Wuerstchen2
    assert Wuerstchen2.part_names == family_info(ModelType.WUERSTCHEN_2).parts
    assert supports(ModelType.WUERSTCHEN_2, "LORA")


# ---------------------------------------------------------------- the training step


def test_encode_images_is_scaled_normalised_effnet_features(model):
    import torch.nn.functional as F

    pixels = torch.rand(2, 3, 64, 64) * 2 - 1
    latents = model.encode_images(pixels)
    assert latents.shape == (2, 16, 2, 2)
    x = F.interpolate((pixels + 1) / 2, size=(48, 48), mode="bilinear", antialias=True)
    x = (x - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)) / torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    with torch.no_grad():
        features = model.effnet_encoder(x)
    assert torch.allclose(latents, (features + 1.0) / 42.0, atol=1e-6)
    assert model.encode_images(torch.zeros(1, 3, 128, 96)).shape == (1, 16, 3, 3)


def test_timesteps_map_to_the_continuous_cosine_schedule(model):
    from diffusers import DDPMWuerstchenScheduler

    schedule = model.noise_scheduler
    assert schedule.config.num_train_timesteps == 1000
    r = schedule.ratio(torch.tensor([0, 500, 999]))
    assert torch.allclose(r, torch.tensor([0.001, 0.541, 1.0]))  # r = 1.08 t + 0.001, clamped
    reference = DDPMWuerstchenScheduler()._alpha_cumprod(r, "cpu")
    assert torch.allclose(schedule.alphas_cumprod[[0, 500, 999]], reference, atol=1e-6)
    assert torch.all(schedule.betas >= 0) and torch.all(schedule.betas < 1)

    latents, noise = torch.randn(2, 16, 2, 2), torch.randn(2, 16, 2, 2)
    t = torch.tensor([100, 700])
    ac = DDPMWuerstchenScheduler()._alpha_cumprod(schedule.ratio(t), "cpu").view(-1, 1, 1, 1)
    assert torch.allclose(model.add_noise(latents, noise, t), ac.sqrt() * latents + (1 - ac).sqrt() * noise, atol=1e-5)
    assert torch.equal(model.prediction_target(latents, noise, t), noise)
    assert model.prediction_type == "epsilon"


def test_predict_gives_the_prior_r_and_the_text_hidden_states(model):
    cond = model.encode_text(["a red circle", ""])
    with torch.no_grad():
        last = model.text_encoder(model.tokenize(["a red circle", ""]).input_ids,
                                  attention_mask=model.tokenize(["a red circle", ""]).attention_mask).last_hidden_state
    assert torch.allclose(cond["prompt_embeds"], last)
    noisy, t = torch.randn(2, 16, 2, 2), torch.tensor([0, 999])
    with torch.no_grad():
        pred = model.predict(noisy, t, cond)
        direct = model.prior(noisy, r=torch.tensor([0.001, 1.0]), c=cond["prompt_embeds"])
    assert pred.shape == (2, 16, 2, 2) and torch.allclose(pred, direct)


def test_clip_skip_and_unsupported_schedule_options(model):
    model.layer_skips = {"text_encoder": 1}
    try:
        skipped = model.encode_text(["a"])["prompt_embeds"]
    finally:
        model.layer_skips = {}
    assert not torch.allclose(skipped, model.encode_text(["a"])["prompt_embeds"])
    with pytest.raises(ValueError, match="force_v_prediction"):
        model.configure_noise_schedule(prediction_type="v_prediction")
    with pytest.raises(ValueError, match="zero_terminal_snr"):
        model.configure_noise_schedule(zero_terminal_snr=True)
    with pytest.raises(ValueError, match="zero_terminal_snr: .*cannot be rescaled"):  # as configure_model asks: with v
        model.configure_noise_schedule(prediction_type="v_prediction", zero_terminal_snr=True)
    model.configure_noise_schedule(prediction_type="epsilon")


def test_sample_has_the_asked_size_and_follows_the_seed(model):
    a = model.sample("a red circle", height=64, width=96, steps=2, cfg_scale=2.0, seed=3)
    b = model.sample("a red circle", height=64, width=96, steps=2, cfg_scale=2.0, seed=3)
    c = model.sample("a red circle", height=64, width=96, steps=2, cfg_scale=2.0, seed=4)
    assert a.size == (96, 64)
    assert list(a.getdata()) == list(b.getdata()) and list(a.getdata()) != list(c.getdata())
    assert model.decode_latents(torch.zeros(1, 16, 2, 2), steps=1).shape[:2] == (1, 3)


# ---------------------------------------------------------------- saving and LoRA


def test_save_diffusers_reloads(model, tiny, tmp_path):
    from diffusers.pipelines.deprecated.wuerstchen import WuerstchenPrior
    from safetensors.torch import load_file

    from ot_gradio.models.wuerstchen import Wuerstchen2

    out = model.save_diffusers(tmp_path / "saved", "FLOAT_16")
    prior = WuerstchenPrior.from_pretrained(str(out), subfolder="prior", torch_dtype=torch.float16)
    assert load_file(str(out / "prior" / "diffusion_pytorch_model.safetensors"))["projection.weight"].dtype == torch.float16
    assert torch.equal(prior.projection.weight, model.prior.projection.weight.half())
    again = Wuerstchen2.load(str(out), offline=True, part_models={"decoder": str(tiny["decoder"]), "effnet_encoder": str(tiny["effnet"])})
    assert again.prior_pipeline_config["latent_mean"] == 42.0
    with pytest.raises(ValueError, match="DIFFUSERS"):
        model.save_single_file(tmp_path / "x.safetensors", None)


def test_lora_presets_and_kohya_names(tmp_path):
    from diffusers.pipelines.deprecated.wuerstchen import WuerstchenPrior

    from ot_gradio.models.wuerstchen import LORA_PRESETS
    from ot_gradio.training.lora import select_lora_targets
    from ot_gradio.training.lora_format import load_lora_file, save_lora_parts

    prior = WuerstchenPrior(c_in=16, c=32, c_cond=32, c_r=64, depth=2, nhead=2)
    layers = {n for n, m in prior.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and getattr(m, "groups", 1) == 1}
    full = set(select_lora_targets(prior, kind="unet", layer_preset="full", presets=LORA_PRESETS))
    assert full == layers
    only = set(select_lora_targets(prior, kind="unet", layer_preset="attn-only", presets=LORA_PRESETS))
    assert only == {n for n in layers if ".attention." in n} and "blocks.2.attention.to_q" in only
    mlp = set(select_lora_targets(prior, kind="unet", layer_preset="attn-mlp", presets=LORA_PRESETS))
    assert only < mlp and "blocks.0.channelwise.0" in mlp and "blocks.2.kv_mapper.1" in mlp

    parts = {
        "prior": {"blocks.2.attention.to_q.lora_A.weight": torch.ones(4, 32), "blocks.2.attention.to_q.lora_B.weight": torch.ones(32, 4),
                  "cond_mapper.0.lora_A.weight": torch.ones(4, 32), "cond_mapper.0.lora_B.weight": torch.ones(32, 4)},
        "text_encoder": {"encoder.layers.0.self_attn.q_proj.lora_A.weight": torch.ones(4, 32),
                         "encoder.layers.0.self_attn.q_proj.lora_B.weight": torch.ones(32, 4)},
    }
    path = save_lora_parts(tmp_path / "w.safetensors", parts, 4, 2.0, base_model_version="wuerstchen_v2")
    from safetensors.torch import load_file

    keys = set(load_file(str(path)))
    assert "lora_prior_unet_blocks_2_attention_to_q.lora_down.weight" in keys
    assert "lora_prior_te_text_model_encoder_layers_0_self_attn_q_proj.alpha" in keys
    assert not any(k.startswith(("lora_unet_", "lora_te_")) for k in keys)
    loaded = load_lora_file(path)
    assert set(loaded.parts["prior"]) == set(parts["prior"]) and set(loaded.parts["text_encoder"]) == set(parts["text_encoder"])
