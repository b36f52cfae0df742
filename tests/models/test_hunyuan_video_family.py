"""What only HunyuanVideo does: its prompts are encoded exactly as HunyuanVideoPipeline encodes
them (the Llama template cropped, CLIP pooled), its latents are scaled as the pipeline unscales
them, an image is a one-frame video, and training feeds the guidance embedding the config's value."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(scope="module")
def hunyuan():
    from ot_gradio.models.hunyuan_video import HunyuanVideo
    from ot_gradio.models.tiny.hunyuan_video import tiny_hunyuan_video_components

    return HunyuanVideo(tiny_hunyuan_video_components())


def test_prompts_are_encoded_as_the_pipeline_does(hunyuan):
    prompts = ["a red circle", "two blue squares moving left, fast"]
    ours = hunyuan.encode_text(prompts)
    embeds, pooled, mask = hunyuan.pipeline().encode_prompt(prompts, device="cpu", max_sequence_length=256)
    assert ours["encoder_hidden_states"].shape == (2, 256, 32) and ours["pooled_projections"].shape == (2, 32)
    torch.testing.assert_close(ours["encoder_hidden_states"], embeds)
    torch.testing.assert_close(ours["pooled_projections"], pooled)
    assert torch.equal(ours["attention_mask"], mask)
    # the template's 95 tokens are exactly what the crop drops: the mask starts at the prompt's own tokens
    prompt_tokens = len(hunyuan.tokenizer(prompts[0], add_special_tokens=False).input_ids)
    assert int(ours["attention_mask"][0].sum()) == prompt_tokens + 1  # and the <|eot_id|> closing it


def test_the_runs_token_window_guidance_and_layer_skip(hunyuan):
    config = SimpleNamespace(text_encoder_sequence_length=64, transformer=SimpleNamespace(guidance_scale=3.0), frames="9",
                             frame_rate=24.0, clip_start=0.0)
    hunyuan.configure_flow(config)
    try:
        assert hunyuan.encode_text(["a cat"])["encoder_hidden_states"].shape == (1, 64, 32)
        assert hunyuan.tokenizer.model_max_length == 64 + 95 and hunyuan.sample_options()["num_frames"] == 9
        seen = {}
        hook = hunyuan.transformer.register_forward_pre_hook(lambda _, args, kwargs: seen.update(kwargs), with_kwargs=True)
        latents = torch.zeros(1, 16, 1, 4, 4)
        hunyuan.predict(latents, torch.tensor([0.25]), hunyuan.encode_text(["a cat"]))
        hook.remove()
        assert seen["guidance"].tolist() == [3000.0] and seen["timestep"].tolist() == [250.0]
        third_to_last = hunyuan.encode_text(["a cat"])["encoder_hidden_states"]
        hunyuan.layer_skips = {"text_encoder": 1}  # the fourth-to-last hidden state
        assert not torch.allclose(hunyuan.encode_text(["a cat"])["encoder_hidden_states"], third_to_last)
        with pytest.raises(ValueError, match="text_encoder_2_layer_skip"):
            hunyuan.layer_skips = {"text_encoder_2": 1}
    finally:
        hunyuan.layer_skips = {}
        hunyuan.configure_flow(SimpleNamespace(text_encoder_sequence_length=None, transformer=SimpleNamespace(guidance_scale=1.0),
                                               frames="5", frame_rate=24.0, clip_start=0.0))
    assert hunyuan.text_encoder_sequence_length == 256


def test_latents_are_scaled_as_the_pipeline_unscales_them_and_an_image_is_one_frame(hunyuan):
    image = torch.rand(1, 3, 32, 32) * 2 - 1
    one = hunyuan.encode_images(image, sample=False)
    assert one.shape == (1, 16, 1, 4, 4)
    torch.testing.assert_close(one, hunyuan.encode_images(image.unsqueeze(2), sample=False))
    raw = hunyuan.vae.encode(image.unsqueeze(2)).latent_dist.mode()
    torch.testing.assert_close(one, raw * hunyuan.vae.config.scaling_factor)
    assert hunyuan.encode_images(torch.zeros(1, 3, 9, 32, 32), sample=False).shape == (1, 16, 3, 4, 4)
    assert hunyuan.decode_latents(one).shape == (1, 3, 1, 32, 32)


def test_a_kohya_file_converts_to_the_diffusers_lora_the_pipeline_loads_whole(tiny_dir, tmp_path):
    """Diffusers does not read HunyuanVideo's kohya layout (ComfyUI's names, q/k/v fused); the convert
    tool turns it into the DIFFUSERS_LORA that HunyuanVideoPipeline loads, every layer of it."""
    from ot_gradio.models.hunyuan_video import HunyuanVideo
    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.tools.jobs import run_inline
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_format import KOHYA, save_lora
    from tests.e2e.runs import lora_load_problems

    base = resolve_tiny("tiny:hunyuan_video").diffusers_dir
    model = HunyuanVideo.load(str(base), offline=True)
    add_lora(model.transformer, kind="unet", rank=4, alpha=2.0, dropout=0.0, layer_preset="full", presets=model.lora_layer_presets["transformer"])
    layers = [name for name, _ in model.transformer.named_parameters() if "lora_B" in name]
    kohya = save_lora(tmp_path / "kohya.safetensors", {"transformer": model.transformer}, lora_format=KOHYA,
                      base_model_version=model.lora_base_model_version, module_names=model.lora_module_names())
    converted = run_inline("convert", {"operation": "lora", "model_type": "HUNYUAN_VIDEO", "input": str(kohya), "base": str(base),
                                       "output": str(tmp_path / "peft.safetensors"), "to": "diffusers"})
    pipe = HunyuanVideo.load(str(base), offline=True).pipeline()
    assert lora_load_problems(pipe, converted["output"]) == []
    assert sum(1 for name, _ in pipe.transformer.named_parameters() if "lora_B" in name) == len(layers) > 0


def test_the_transformer_file_is_the_original_layout_read_back_by_diffusers(tiny_dir, tmp_path):
    """ORIGINAL_TRANSFORMER writes Tencent's names (the file ComfyUI loads): diffusers' own converter
    of that layout gives back every weight exactly (the single blocks' `linear1` it can split only at
    the full model's width 3072: there, the file's rows are q, k, v and the MLP input in that order),
    and the file loads as `transformer.model_name`, in ComfyUI's own spelling too; one that lacks a
    weight is refused, naming it."""
    from diffusers.loaders.single_file_utils import convert_hunyuan_video_transformer_to_diffusers
    from safetensors.torch import load_file, save_file

    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.hunyuan_video import HunyuanVideo
    from ot_gradio.models.tiny import resolve_tiny
    from tests.comfy_reference import hunyuan_video_comfy_key

    base = resolve_tiny("tiny:hunyuan_video").diffusers_dir
    model = HunyuanVideo.load(str(base), offline=True)
    with torch.no_grad():  # changed weights, to see them come back from the file
        model.transformer.transformer_blocks[0].attn.add_k_proj.weight.add_(1.0)
        model.transformer.single_transformer_blocks[0].attn.to_v.bias.add_(1.0)
    file = model.save_single_file(tmp_path / "hunyuan.safetensors", torch.float32)
    original = load_file(str(file))
    assert {"double_blocks.0.img_attn_qkv.weight", "double_blocks.0.txt_attn_qkv.weight", "single_blocks.0.linear1.weight",
            "txt_in.individual_token_refiner.blocks.0.self_attn_qkv.weight", "final_layer.adaLN_modulation.1.weight",
            "img_in.proj.weight", "double_blocks.0.img_attn_q_norm.weight"} <= original.keys()
    ours = model.transformer.state_dict()
    linear1 = {k: original.pop(k) for k in list(original) if k.startswith("single_blocks.") and ".linear1." in k}
    back = convert_hunyuan_video_transformer_to_diffusers(dict(original))
    assert all(torch.equal(back[k], ours[k]) for k in back)
    for key, fused in linear1.items():
        block, _, param = key.replace("single_blocks", "single_transformer_blocks").rpartition(".linear1.")
        rows = [ours[f"{block}.{m}.{param}"] for m in ("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp")]
        assert torch.equal(fused, torch.cat(rows))
        back.update(dict.fromkeys((f"{block}.{m}.{param}" for m in ("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp")), None))
    assert back.keys() == ours.keys()
    reloaded = HunyuanVideo.load(str(base), offline=True, part_models={"transformer": str(file)}).transformer.state_dict()
    assert reloaded.keys() == ours.keys() and all(torch.equal(reloaded[k], ours[k]) for k in ours)
    # the same weights as a model ComfyUI saved them: its spelling (img_attn.qkv, norm.query_norm.scale), its prefix
    comfy = {"model.diffusion_model." + hunyuan_video_comfy_key(k): v for k, v in load_file(str(file)).items()}
    assert "model.diffusion_model.double_blocks.0.img_attn.norm.query_norm.scale" in comfy
    save_file(comfy, str(tmp_path / "comfy.safetensors"))
    reloaded = HunyuanVideo.load(str(base), offline=True, part_models={"transformer": str(tmp_path / "comfy.safetensors")})
    assert all(torch.equal(reloaded.transformer.state_dict()[k], ours[k]) for k in ours)
    without = {k: v for k, v in load_file(str(file)).items() if k != "double_blocks.0.img_attn_qkv.bias"}
    save_file(without, str(tmp_path / "short.safetensors"))
    with pytest.raises(ModelLoadError, match=r"The transformer file has no \['transformer_blocks\.0\.attn\.to_k\.bias'"):
        HunyuanVideo.load(str(base), offline=True, part_models={"transformer": str(tmp_path / "short.safetensors")})
