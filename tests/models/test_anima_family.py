"""What only Anima does: its prompts go through Qwen3 and the LLM adapter exactly as diffusers'
Anima blocks encode and condition them, a sample is the modular pipeline's own image, its kohya
names are the DiT keys diffusers' Anima LoRA converter reads, and a fine-tuned model saves as a
folder in the repo's modular layout that both we and diffusers load."""

from __future__ import annotations

import pytest
import torch

PROMPTS = ["a red circle, two blue squares", "", "x"]


@pytest.fixture(scope="module")
def anima():
    from ot_gradio.models.anima import Anima
    from ot_gradio.models.tiny.anima import tiny_anima_components

    return Anima(tiny_anima_components())


def _pipeline_conditioning(pipe, prompts, max_sequence_length: int = 512) -> torch.Tensor:
    from diffusers.modular_pipelines.anima.before_denoise import AnimaTextConditioningStep
    from diffusers.modular_pipelines.anima.encoders import AnimaTextEncoderStep

    out = AnimaTextEncoderStep.encode_prompt(pipe.full, prompts, prepare_unconditional_embeds=False,
                                             max_sequence_length=max_sequence_length, device=torch.device("cpu"))
    return AnimaTextConditioningStep._condition_prompt_embeds(
        pipe.full, out["qwen_prompt_embeds"], out["qwen_attention_mask"], out["t5_input_ids"], out["t5_attention_mask"],
        device=torch.device("cpu"), conditioning_dtype=torch.float32, output_dtype=torch.float32)


def test_prompts_are_encoded_and_conditioned_as_the_pipeline_does(anima):
    pipe = anima.pipeline()
    ours = anima.encode_text(PROMPTS)["encoder_hidden_states"]
    assert ours.shape == (3, 512, 32) and ours[1, 1:].abs().max() == 0  # an empty prompt: T5's end token alone
    torch.testing.assert_close(ours, _pipeline_conditioning(pipe, PROMPTS))
    anima.text_encoder_sequence_length = 4  # a shorter window cuts both tokenizers as max_sequence_length does
    try:
        torch.testing.assert_close(anima.encode_text(PROMPTS)["encoder_hidden_states"], _pipeline_conditioning(pipe, PROMPTS, 4))
    finally:
        anima.text_encoder_sequence_length = None


def test_window_and_layer_skip_refusals(anima):
    with pytest.raises(ValueError, match="text_encoder_sequence_length: 513 .* 1 to 512"):
        anima.text_encoder_sequence_length = 513
    with pytest.raises(ValueError, match="text_encoder_layer_skip: 1 is out of range; .* 0 to 0"):
        anima.layer_skips = {"text_encoder": 1}


def test_a_sample_is_the_pipelines_own_image(anima):
    """Our conditioning through the pipeline's denoising blocks draws what AnimaAutoBlocks draws
    from the prompt itself, with CFG and the negative prompt."""
    ours = anima.sample("a red circle", negative_prompt="blurry", height=32, width=32, steps=2, cfg_scale=4.0, seed=3)
    pipe = anima.pipeline()
    pipe.full.update_components(guider=pipe.full.guider.new(guidance_scale=4.0))
    with torch.no_grad():
        latents = pipe.full(prompt="a red circle", negative_prompt="blurry", height=32, width=32, num_inference_steps=2,
                            generator=torch.Generator().manual_seed(3), output="latents")
    from diffusers.image_processor import VaeImageProcessor

    theirs = VaeImageProcessor(vae_scale_factor=anima.vae_scale_factor).postprocess(anima.decode_sample(latents, 32, 32), output_type="pil")[0]
    import numpy as np

    assert np.abs(np.asarray(ours, dtype=np.int16) - np.asarray(theirs, dtype=np.int16)).max() <= 1
    plain = anima.sample("a red circle", height=32, width=32, steps=2, cfg_scale=4.0, seed=3)
    assert np.asarray(plain).tolist() != np.asarray(ours).tolist()  # the negative prompt is used


def test_kohya_names_are_the_dit_keys_diffusers_anima_converter_reads(anima):
    from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_anima_lora_to_diffusers

    from ot_gradio.models.key_layout import layer_paths

    names = anima.lora_module_names()["transformer"]
    paths = layer_paths(anima.transformer)
    assert set(names) == set(paths) and all(n.startswith("lora_unet_") for n in names.values())
    from ot_gradio.models.comfy_lora_names import anima_original

    original = {f"diffusion_model.{anima_original(p)}.lora_A.weight": p for p in paths}
    converted = _convert_non_diffusers_anima_lora_to_diffusers(dict.fromkeys(original, 0))
    assert sorted(converted) == sorted(f"transformer.{p}.lora_A.weight" for p in original.values())


def test_fine_tune_folder_loads_in_our_family_and_in_diffusers(anima, tmp_path):
    from diffusers import ModularPipeline

    from ot_gradio.models.anima import Anima

    folder = anima.save_diffusers(tmp_path / "tuned", torch.bfloat16)
    again = Anima.load(str(folder), offline=True)
    for part in ("transformer", "text_encoder", "vae"):
        ours = {k: v.to(torch.bfloat16) for k, v in getattr(anima, part).state_dict().items()}
        assert all(torch.equal(ours[k], v.to(torch.bfloat16)) for k, v in getattr(again, part).state_dict().items()), part
    pipe = ModularPipeline.from_pretrained(str(folder), local_files_only=True)
    pipe.load_components(torch_dtype=torch.float32)
    assert type(pipe).__name__ == "AnimaModularPipeline" and pipe.text_conditioner is not None and pipe.t5_tokenizer is not None


def test_the_text_cache_is_keyed_by_the_llm_adapter_too(anima):
    """Anima versions may share Qwen3 and differ in the adapter, whose output is what is cached."""
    from ot_gradio.data.text_cache import text_encoder_id

    before = text_encoder_id(anima)
    weight = anima.text_conditioner.out_proj.weight
    kept = weight.detach().clone()
    with torch.no_grad():
        weight.add_(1.0)
        try:
            assert text_encoder_id(anima) != before
        finally:
            weight.copy_(kept)
    assert text_encoder_id(anima) == before


def test_the_original_checkpoint_is_a_transformer_file_of_its_own(anima, tiny_dir, tmp_path):
    """ORIGINAL_TRANSFORMER's file (DiT and adapter under `net.`) as `transformer.model_name`: its
    transformer replaces the base model's, the other parts (the adapter too) stay the base model's."""
    from safetensors import safe_open

    from ot_gradio.models.anima import Anima
    from ot_gradio.models.tiny import resolve_tiny

    with torch.no_grad():
        anima.transformer.proj_out.weight.mul_(2.0)
    try:
        path = anima.save_single_file(tmp_path / "anima.safetensors", None)
    finally:
        with torch.no_grad():
            anima.transformer.proj_out.weight.div_(2.0)
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
    assert "net.final_layer.linear.weight" in keys and "net.blocks.0.self_attn.q_norm.weight" in keys
    assert "net.llm_adapter.out_proj.weight" in keys and not [k for k in keys if not k.startswith("net.")]
    base = resolve_tiny("tiny:anima").diffusers_dir
    model = Anima.load(str(base), offline=True, part_models={"transformer": str(path)})
    plain = Anima.load(str(base), offline=True)
    torch.testing.assert_close(model.transformer.proj_out.weight, plain.transformer.proj_out.weight * 2)
    assert torch.equal(model.transformer.transformer_blocks[0].attn1.to_q.weight, plain.transformer.transformer_blocks[0].attn1.to_q.weight)
