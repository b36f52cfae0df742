"""What only HiDream does: its prompts are encoded exactly as HiDreamImagePipeline encodes them
(CLIP-L and CLIP-G pooled, T5, every Llama layer), the transformer's negated output is the
velocity in training and in samples, its mixture-of-experts layers give gradients while training,
latents are scaled as the pipeline unscales them, and the hub's layout (no Llama in the repo)
loads with the Llama named by text_encoder_4.model_name and is refused without it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch


@pytest.fixture(scope="module")
def hidream():
    from ot_gradio.models.hidream import HiDream
    from ot_gradio.models.tiny.hidream import tiny_hidream_components

    model = HiDream(tiny_hidream_components())
    model.transformer.eval()  # as loaded models are
    return model


def test_prompts_are_encoded_as_the_pipeline_does(hidream):
    prompts = ["a red circle", "two blue squares moving left, fast"]
    ours = hidream.encode_text(prompts)
    t5, _, llama, _, pooled, _ = hidream.pipeline().encode_prompt(
        prompts, prompts, prompts, prompts, do_classifier_free_guidance=False, device="cpu", max_sequence_length=128)
    assert ours["t5"].shape == (2, 128, 64) and ours["llama"].shape == (2, 2, 128, 32) and ours["pooled_embeds"].shape == (2, 80)
    torch.testing.assert_close(ours["t5"], t5)
    torch.testing.assert_close(ours["llama"].transpose(0, 1), llama)
    torch.testing.assert_close(ours["pooled_embeds"], pooled)


def test_attention_mask_zeroes_the_padding_of_t5_and_llama(tmp_path):
    from ot_gradio.models.hidream import HiDream
    from ot_gradio.models.tiny.hidream import tiny_hidream_components
    from tests.models.family_checks import assert_padding_mask_reaches_training_and_samples

    model = HiDream(tiny_hidream_components())
    model.transformer.eval()
    prompts = ["a", "a red circle"]
    off = model.encode_text(prompts)
    model.mask_padding_tokens = True
    on = model.encode_text(prompts)
    t5_mask, llama_mask = model._tokens("text_encoder_3", prompts)[1], model._tokens("text_encoder_4", prompts)[1]
    assert 0 < int(t5_mask[0].sum()) < int(t5_mask[1].sum()) < t5_mask.shape[1] and int(llama_mask[0].sum()) < llama_mask.shape[1]
    torch.testing.assert_close(on["t5"], off["t5"] * t5_mask[:, :, None])
    torch.testing.assert_close(on["llama"], off["llama"] * llama_mask[:, None, :, None])
    torch.testing.assert_close(on["pooled_embeds"], off["pooled_embeds"])
    model.mask_padding_tokens = False
    assert_padding_mask_reaches_training_and_samples(model, (1, 16, 8, 8), tmp_path, cfg_scale=4.0)


def test_the_velocity_is_the_negated_output_in_training_and_in_samples(hidream):
    cond = hidream.encode_text(["a cat", "a dog"])
    latents, t = torch.randn(2, 16, 4, 4), torch.tensor([0.3, 0.6])
    transformer = hidream.transformer
    with torch.no_grad():
        pipeline_output = transformer(hidden_states=latents, timesteps=t * 1000, encoder_hidden_states_t5=cond["t5"],
                                      encoder_hidden_states_llama3=cond["llama"].transpose(0, 1),
                                      pooled_embeds=cond["pooled_embeds"], return_dict=False)[0]
        torch.testing.assert_close(hidream.predict(latents, t, cond), -pipeline_output)
    wide = torch.randn(2, 16, 4, 6)  # not square: the patches come back in place, in training mode too
    with torch.no_grad():
        eval_output = hidream.predict(wide, t, cond)
    transformer.train()
    try:
        torch.testing.assert_close(hidream.predict(wide, t, cond), eval_output)
        transformer.eval()  # as the trainer runs a loaded model: the experts route for training all the same
        hidream.predict(wide, t, cond).square().mean().backward()
        experts = [p.grad for n, p in transformer.named_parameters() if ".experts." in n and "shared" not in n]
        assert experts and all(g is not None and g.abs().sum() > 0 for g in experts)
    finally:
        transformer.eval()
        transformer.zero_grad(set_to_none=True)


def test_latents_are_scaled_as_the_pipeline_unscales_them(hidream):
    image = torch.rand(1, 3, 32, 32) * 2 - 1
    latents = hidream.encode_images(image, sample=False)
    config = hidream.vae.config
    raw = hidream.vae.encode(image).latent_dist.mode()
    torch.testing.assert_close(latents, (raw - config.shift_factor) * config.scaling_factor)
    torch.testing.assert_close(hidream.decode_latents(latents), hidream.vae.decode(latents / config.scaling_factor + config.shift_factor).sample)


def test_the_hub_layout_loads_with_the_llama_named_and_is_refused_without(tmp_path):
    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.hidream import HiDream
    from ot_gradio.models.tiny import resolve_tiny

    base, llama = tmp_path / "HiDream-I1-Full", tmp_path / "Llama-3.1-8B-Instruct"
    shutil.copytree(resolve_tiny("tiny:hidream").diffusers_dir, base)
    llama.mkdir()
    for part in ("text_encoder_4", "tokenizer_4"):  # as the hub has them: a Llama repo apart, empty entries in the index
        for file in (base / part).iterdir():
            shutil.move(str(file), llama / file.name)
        (base / part).rmdir()
    index = json.loads((base / "model_index.json").read_text())
    (base / "model_index.json").write_text(json.dumps({**index, "text_encoder_4": [None, None], "tokenizer_4": [None, None]}))
    with pytest.raises(ModelLoadError, match=r"text_encoder_4.model_name: .* has no Llama .* meta-llama/Llama-3.1-8B-Instruct"):
        HiDream.load(str(base), offline=True)
    model = HiDream.load(str(base), offline=True, part_models={"text_encoder_4": str(llama)})
    whole = HiDream.load("tiny:hidream", offline=True)
    torch.testing.assert_close(model.encode_text(["a cat"])["llama"], whole.encode_text(["a cat"])["llama"])
    with pytest.raises(ModelLoadError, match="text_encoder_4.model_name: the Llama"):
        HiDream.load(str(base), offline=True, part_models={"text_encoder_4": str(tmp_path / "nowhere")})


def test_a_repo_sampling_with_unipc_in_flow_mode_trains_flow_matching_and_samples():
    """The pipeline also takes UniPC in flow mode (it sets that scheduler's steps itself)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    from ot_gradio.models.hidream import HiDream
    from ot_gradio.models.tiny.hidream import tiny_hidream_components

    unipc = UniPCMultistepScheduler(use_flow_sigmas=True, prediction_type="flow_prediction", flow_shift=3.0)
    model = HiDream({**tiny_hidream_components(), "scheduler": unipc})
    model.transformer.eval()
    assert isinstance(model.noise_scheduler, FlowMatchEulerDiscreteScheduler) and model.noise_scheduler.config.shift == 3.0
    assert model.sample("a cat", height=64, width=48, steps=2).size == (48, 64)
