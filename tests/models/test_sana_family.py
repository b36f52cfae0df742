"""The Sana family on the tiny model: loading (folder, tiny name; single files refused), text
encoding exactly as SanaPipeline does it (the complex human instruction, the kept tokens, the
mask), predict's timestep convention checked against the pipeline's own denoising steps, the
DC-AE latents, sampling, saving, and a DIFFUSERS LoRA that SanaPipeline loads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.sana import COMPLEX_HUMAN_INSTRUCTION, Sana
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
PROMPT = "A Red circle "
tiny_sana_paths, sana = family_fixtures("sana", Sana, "tiny_sana_paths", "sana")
_images = pipeline_images()


def test_tiny_model_has_sana_s_classes_and_single_files_are_refused(sana, tiny_sana_paths, tmp_path):
    """Loading by name and by folder: tests/models/test_families.py."""
    assert type(sana.text_encoder).__name__ == "Gemma2Model" and type(sana.vae).__name__ == "AutoencoderDC"
    assert sana.vae_scale_factor == 32 and sana.transformer.config.in_channels == 32
    tok = sana.tokenizer
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2) and tok("a").input_ids[0] == 2
    single = tmp_path / "sana.safetensors"
    single.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="Could not load base model .*check that it is a Sana diffusers folder"):
        Sana.load(str(single), config_dir=str(tiny_sana_paths.diffusers_dir), offline=True)  # not a checkpoint inside
    with pytest.raises(ValueError, match="output_model_format"):
        sana.save_single_file(tmp_path / "out.safetensors", None)


def test_encode_text_is_exactly_what_the_pipeline_feeds_the_transformer(sana):
    """The instruction goes in front, <bos> and the last 299 tokens are kept; the negative
    prompt gets neither. Lower-cased and stripped, as the pipeline does."""
    pipe = sana.pipeline()
    prompts = [PROMPT, "a much longer caption about a blue square on grey"]
    cond = sana.encode_text(prompts)
    assert cond["encoder_hidden_states"].shape == (2, 300, 32) and cond["attention_mask"].shape == (2, 300)
    prefix = len(sana.tokenizer.encode("\n".join(COMPLEX_HUMAN_INSTRUCTION)))
    assert prefix > 300  # the instruction is longer than the window: its tail and the prompt are kept
    with torch.no_grad():
        embeds, mask, neg, neg_mask = pipe.encode_prompt(
            prompts, True, negative_prompt="Blue ", device=CPU, complex_human_instruction=list(COMPLEX_HUMAN_INSTRUCTION)
        )
    assert torch.equal(cond["encoder_hidden_states"], embeds) and torch.equal(cond["attention_mask"], mask)
    import inspect

    assert inspect.signature(pipe.__call__).parameters["complex_human_instruction"].default == list(COMPLEX_HUMAN_INSTRUCTION)
    uncond = sana.encode_text(["Blue ", "Blue "], instruction=False)
    assert torch.equal(uncond["encoder_hidden_states"], neg) and torch.equal(uncond["attention_mask"], neg_mask)
    assert int(uncond["attention_mask"][0].sum()) < 10  # padded on the right, masked
    sana.layer_skips = {"text_encoder": 1}
    try:
        assert not torch.equal(sana.encode_text([PROMPT])["encoder_hidden_states"], cond["encoder_hidden_states"][:1])
    finally:
        sana.layer_skips = {}
    with pytest.raises(ValueError, match="text_encoder_layer_skip: 2"):
        sana.layer_skips = {"text_encoder": 2}
    sana.text_encoder_sequence_length = 64  # the run's window (the core sets it; blank = 300)
    try:
        assert sana.encode_text([PROMPT])["encoder_hidden_states"].shape == (1, 64, 32) and sana.tokenizer.model_max_length == 64
    finally:
        sana.text_encoder_sequence_length = None
    assert sana.text_encoder_sequence_length == 300 == sana.tokenizer.model_max_length


def test_predict_and_euler_steps_reproduce_the_pipelines_denoising(sana):
    """predict(x, t) is the velocity noise - latents with the transformer reading t * 1000:
    Euler steps x += (t_next - t) * v with the pipeline's sigmas land where SanaPipeline's loop
    (timestep sigma * 1000 * timestep_scale, FlowMatchEuler's step) does."""
    noise = torch.randn(1, 32, 2, 3, generator=torch.Generator().manual_seed(3))
    cond = sana.encode_text([PROMPT])
    with torch.no_grad():
        theirs = sana.pipeline()(
            prompt_embeds=cond["encoder_hidden_states"], prompt_attention_mask=cond["attention_mask"], guidance_scale=1.0,
            latents=noise.clone(), height=64, width=96, num_inference_steps=3, output_type="latent",
            use_resolution_binning=False,
        ).images
        scheduler = type(sana.scheduler).from_config(sana.scheduler.config)
        scheduler.set_timesteps(3)
        sigmas = scheduler.sigmas.tolist()
        assert sigmas[0] == 1.0 and sigmas[-1] == 0.0 and sigmas[1] > 2 / 3  # shift 3
        x = noise.clone()
        for t, t_next in zip(sigmas[:-1], sigmas[1:], strict=True):
            x = x + (t_next - t) * sana.predict(x, torch.tensor([t]), cond)
    torch.testing.assert_close(x, theirs, atol=1e-5, rtol=1e-5)
    pixels = torch.rand(2, 3, 64, 96) * 2 - 1
    latents = sana.encode_images(pixels)
    raw = sana.vae.encode(pixels).latent
    torch.testing.assert_close(latents, raw * 0.41407)
    assert latents.shape == (2, 32, 2, 3) and sana.image_seq_len(latents) == 6
    assert sana.decode_latents(latents).shape == (2, 3, 64, 96)
    with torch.no_grad():
        v = sana.predict(latents, torch.tensor([0.2, 0.9]), sana.encode_text(["a", "b c d"]))
    assert v.shape == latents.shape and sana.schedule_kind == "flow_matching" and sana.prediction_type == "flow"


def test_sample_uses_cfg_and_the_negative_prompt_and_keeps_modes(sana):
    assert_sample_uses_cfg_and_the_negative_prompt(sana, PROMPT, plain_cfg=1.0)


def test_save_diffusers_round_trips(sana, tmp_path):
    out = sana.save_diffusers(tmp_path / "out", None)
    again = Sana.load(str(out))
    assert_same_parts(sana, again)
    assert again.tokenizer("a red circle").input_ids == sana.tokenizer("a red circle").input_ids


def test_layer_presets_skip_the_depthwise_convs(sana):
    from ot_gradio.training.lora import select_lora_targets

    presets = sana.lora_layer_presets["transformer"]
    pick = {p: select_lora_targets(sana.transformer, kind="unet", layer_preset=p, presets=presets) for p in presets}
    every = [n for n, m in sana.transformer.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    assert sorted(set(every) - set(pick["full"])) == ["transformer_blocks.0.ff.conv_depth", "transformer_blocks.1.ff.conv_depth"]
    assert set(pick["attn-only"]) < set(pick["attn-mlp"]) < set(pick["full"])
    assert any(n.endswith("ff.conv_point") for n in pick["attn-mlp"])


def test_diffusers_lora_loads_in_sana_pipeline_without_warnings(tiny_sana_paths, tmp_path):
    from diffusers import SanaPipeline

    model = Sana.load(str(tiny_sana_paths.diffusers_dir))
    base = _images(model.pipeline(), prompt=PROMPT)
    add_random_lora(model, lora_rank=4, lora_alpha=2.0, layer_filter_preset="full")
    trained = _images(model.pipeline(), prompt=PROMPT)
    path = save_lora(tmp_path / "d.safetensors", {"transformer": model.transformer},
                     base_model_version=model.lora_base_model_version, lora_format=DIFFUSERS)
    pipe = local_pipeline(tiny_sana_paths.diffusers_dir, SanaPipeline)
    assert lora_load_problems(pipe, path) == []
    image = _images(pipe, prompt=PROMPT)
    np.testing.assert_allclose(image, trained, atol=1e-5)
    assert np.abs(image - base).max() > 1e-3
