"""What only ERNIE-Image does: prompts encoded as ErnieImagePipeline encodes them (each alone,
hidden state -2, no padding) and fed as it feeds them (zero padding, the lengths); latents
normalised as the pipeline denormalises them (its epsilon, 1e-5); the prompt enhancer left alone."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def ernie():
    from ot_gradio.models.ernie import Ernie
    from ot_gradio.models.tiny.ernie import tiny_ernie_components

    return Ernie(tiny_ernie_components())


PROMPTS = ["a red circle", "  two blue squares moving left, fast ", ""]


def test_prompts_are_encoded_as_the_pipeline_does(ernie):
    pipe = ernie.pipeline()
    reference = pipe.encode_prompt(PROMPTS, device="cpu")
    ours = ernie.encode_text(PROMPTS)
    assert ours["encoder_hidden_states"].shape == (3, 512, 16) and ours["attention_mask"].sum(1).tolist() == [
        len(r) for r in reference]
    assert not ours["encoder_hidden_states"][~ours["attention_mask"]].any()
    for mine, theirs in zip(ernie.prompt_list(ours), reference, strict=True):
        torch.testing.assert_close(mine, theirs)
    ernie.text_encoder_sequence_length = 8  # the window truncates, as the tokenizer's model_max_length does in the pipeline
    try:
        assert ernie.encode_text(PROMPTS)["attention_mask"].sum(1).tolist() == [len(r) for r in pipe.encode_prompt(PROMPTS, "cpu")]
    finally:
        ernie.text_encoder_sequence_length = None


def test_predict_feeds_the_transformer_as_the_pipeline_does(ernie):
    from diffusers import ErnieImagePipeline

    conditioning = ernie.encode_text(PROMPTS[:2])
    noisy, t = torch.randn(2, 32, 4, 4), torch.tensor([0.25, 0.75])
    text, lens = ErnieImagePipeline._pad_text(ernie.prompt_list(conditioning), "cpu", torch.float32, 16)
    expected = ernie.transformer(hidden_states=noisy, timestep=t * 1000, text_bth=text, text_lens=lens, return_dict=False)[0]
    torch.testing.assert_close(ernie.predict(noisy, t, conditioning), expected)


def test_latents_are_normalised_as_the_pipeline_denormalises_them(ernie):
    from diffusers import ErnieImagePipeline

    pixels = torch.rand(1, 3, 64, 64) * 2 - 1
    latents = ernie.encode_images(pixels, sample=False)
    assert latents.shape == (1, 32, 4, 4)
    bn = ernie.vae.bn
    raw = latents * torch.sqrt(bn.running_var.view(1, -1, 1, 1) + 1e-5) + bn.running_mean.view(1, -1, 1, 1)
    torch.testing.assert_close(ErnieImagePipeline._unpatchify_latents(raw), ernie.vae.encode(pixels).latent_dist.mean)
    assert ernie.vae_id.startswith("ernie-")  # not the cache key of Flux.2 latents of the same VAE


def test_the_text_encoder_is_not_trained(ernie):
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="text_encoder.train"):
        ernie.configure_flow(SimpleNamespace(text_encoder=SimpleNamespace(train=True), text_encoder_sequence_length=None))


def test_a_hub_folder_with_the_prompt_enhancer_loads_without_it(tiny_dir, tmp_path):
    """baidu/ERNIE-Image ships `pe` (a 3B Ministral3ForCausalLM); ours is a config without weights,
    so reading it would fail: the family loads the rest and the pipeline it samples with has none."""
    from ot_gradio.models.ernie import Ernie
    from ot_gradio.models.tiny import resolve_tiny
    from tests.models.hub_layouts import save_hub_layout

    folder = save_hub_layout(resolve_tiny("tiny:ernie").diffusers_dir, "tiny:ernie", tmp_path / "ERNIE-Image")
    assert (folder / "pe" / "config.json").is_file() and not list((folder / "pe").glob("*.safetensors"))
    model = Ernie.load(str(folder), offline=True)
    assert model.pipeline().pe is None
    assert model.sample(PROMPTS[0], height=32, width=32, steps=1).size == (32, 32)


def test_the_transformer_file_is_read_back_by_from_single_file(ernie, tiny_dir, tmp_path):
    """ORIGINAL_TRANSFORMER: the transformer alone under diffusers' names, as OneTrainer writes it."""
    from diffusers import ErnieImageTransformer2DModel

    from ot_gradio.models.tiny import resolve_tiny

    path = ernie.save_single_file(tmp_path / "ernie.safetensors", torch.bfloat16)
    again = ErnieImageTransformer2DModel.from_single_file(str(path), config=str(resolve_tiny("tiny:ernie").diffusers_dir),
                                                          subfolder="transformer", local_files_only=True, torch_dtype=torch.bfloat16)
    ours = ernie.transformer.state_dict()
    assert again.state_dict().keys() == ours.keys()
    assert all(torch.equal(v, ours[k].to(torch.bfloat16)) for k, v in again.state_dict().items())
