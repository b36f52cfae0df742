"""What only LTX-2 does: its prompts are encoded exactly as LTX2Pipeline encodes them (Gemma's
stacked states, left padding) and then connected as the pipeline connects them, its latents are
normalised as the pipeline denormalises them, an image is a one-frame video, and training feeds
the audio stream zero latents noised at the video's t for the clip's duration."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(scope="module")
def ltx2():
    from ot_gradio.models.ltx2 import LTX2
    from ot_gradio.models.tiny.ltx2 import tiny_ltx2_components

    return LTX2(tiny_ltx2_components())


def test_prompts_are_encoded_and_connected_as_the_pipeline_does(ltx2):
    prompts = ["a red circle", "  two blue squares moving left, fast "]
    pipe = ltx2.pipeline()
    embeds, mask, _, _ = pipe.encode_prompt(prompts, do_classifier_free_guidance=False, device="cpu", max_sequence_length=1024)
    states, our_mask = ltx2.encode_gemma(prompts)
    assert states.shape == (2, 1024, 32 * 3)
    torch.testing.assert_close(states, embeds)
    assert torch.equal(our_mask, mask) and our_mask[:, -1].all() and not our_mask[:, 0].any()  # left padding
    ours = ltx2.encode_text(prompts)
    video, audio, connector_mask = pipe.connectors(embeds, mask, padding_side="left")
    torch.testing.assert_close(ours["encoder_hidden_states"], video)
    torch.testing.assert_close(ours["audio_encoder_hidden_states"], audio)
    assert torch.equal(ours["attention_mask"], connector_mask)


def test_latents_are_normalised_as_the_pipeline_denormalises_them_and_an_image_is_one_frame(ltx2):
    from diffusers import LTX2Pipeline

    clip = torch.rand(1, 3, 9, 64, 64) * 2 - 1
    latents = ltx2.encode_images(clip, sample=False)
    assert latents.shape == (1, 4, 5, 32, 32)
    raw = ltx2.vae.encode(clip).latent_dist.mode()
    vae = ltx2.vae
    torch.testing.assert_close(LTX2Pipeline._denormalize_latents(latents, vae.latents_mean, vae.latents_std, vae.config.scaling_factor), raw)
    image = clip[:, :, 0]
    torch.testing.assert_close(ltx2.encode_images(image, sample=False), ltx2.encode_images(image.unsqueeze(2), sample=False))
    assert ltx2.decode_latents(latents).shape == (1, 3, 9, 64, 64)


def test_the_audio_stream_reads_noised_zeros_for_the_clips_duration(ltx2):
    config = SimpleNamespace(text_encoder_sequence_length=64, frames="17", frame_rate=25.0, clip_start=0.0)
    ltx2.configure_flow(config)
    try:
        assert ltx2.sample_options()["num_frames"] == 17 and ltx2.encode_text(["a cat"])["encoder_hidden_states"].shape == (1, 64, 32)
        seen = {}
        hook = ltx2.transformer.register_forward_pre_hook(lambda _, args, kwargs: seen.update(kwargs), with_kwargs=True)
        latents = torch.zeros(1, 4, 9, 4, 4)  # the tiny VAE: 17 frames -> 9 latent frames
        torch.manual_seed(0)
        out = ltx2.predict(latents, torch.tensor([0.25]), ltx2.encode_text(["a cat"]))
        hook.remove()
        assert out.shape == latents.shape and seen["timestep"].tolist() == [250.0]
        # 17 frames at 25 fps, 16000 / 160 / 4 audio latents a second: 17
        assert seen["audio_num_frames"] == 17 and seen["audio_hidden_states"].shape == (1, 17, 4)
        torch.manual_seed(0)
        noise = torch.randn(1, 17, 4)
        torch.testing.assert_close(seen["audio_hidden_states"], noise * 0.25)
        assert seen["fps"] == 25.0
    finally:
        ltx2.configure_flow(SimpleNamespace(text_encoder_sequence_length=None, frames="9", frame_rate=24.0, clip_start=0.0))
    assert ltx2.text_encoder_sequence_length == 1024


def test_a_full_gemma_lora_leaves_out_the_vision_tower(ltx2):
    from ot_gradio.training.lora import select_lora_targets

    names = select_lora_targets(ltx2.text_encoder, kind="text_encoder", layer_preset="full", presets=ltx2.lora_layer_presets["text_encoder"])
    assert names and all(".language_model." in f".{n}" for n in names)


def test_the_connectors_are_frozen_and_follow_the_model():
    from ot_gradio.models.ltx2 import LTX2
    from ot_gradio.models.tiny.ltx2 import tiny_ltx2_components

    model = LTX2(tiny_ltx2_components())
    assert not any(p.requires_grad for p in model.connectors.parameters())
    assert {p.device.type for p in model.to("meta").connectors.parameters()} == {"meta"}
