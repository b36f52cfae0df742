"""HunyuanVideo end to end on the tiny model: a LoRA from our preset trained in a worker process
from a folder of three short generated clips and one image, that HunyuanVideoPipeline reloads with
`load_lora_weights` (nothing ignored) and that changes its video; the run's sample is a clip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import clip_run, imported, local_pipeline, lora_load_problems, run_until_done, tiny_fixture, video_latents
from tests.video_clips import write_clips_and_an_image

pytestmark = pytest.mark.slow
PROMPT = "a yellow square moving"

tiny_hunyuan_video = tiny_fixture("hunyuan_video", "tiny_hunyuan_video")


def _video(pipe) -> np.ndarray:
    return video_latents(pipe, PROMPT, guidance_scale=6.0)


def test_lora_from_clips_and_an_image_reloads_in_the_hunyuan_video_pipeline(tiny_hunyuan_video, tmp_path):
    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    # our preset with only the base model, the data, the output and the run's size changed (its
    # FLOAT_8 transformer and Llama, bfloat16 CLIP and float32 VAE kept)
    config = imported(PRESETS_DIR / "hunyuan-video-lora.json", tiny_hunyuan_video.diffusers_dir, data, tmp_path, "lora.safetensors",
                      resolution="64", frames="5", epochs=1, learning_rate=5e-2, lora_rank=4, lora_alpha=4.0, latent_caching=True,
                      learning_rate_warmup_steps=0,  # (the preset's 200 would train its first steps at a rate near 0)
                      sample_after=1, sample_after_unit="EPOCH", samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}])
    assert (config["model_type"], config["output_model_format"], config["layer_filter_preset"]) == ("HUNYUAN_VIDEO", "COMFY_LORA", "blocks")
    config["output_model_format"] = "DIFFUSERS_LORA"  # the layout diffusers' pipeline loads (ComfyUI's: test_comfy_lora_names.py)
    _, keys = clip_run(config, tmp_path, frames=5)  # the samples are clips of the run's 5 frames
    assert any(k.startswith("transformer.transformer_blocks.0.attn.") for k in keys)
    assert any(k.startswith("transformer.single_transformer_blocks.0.") for k in keys)
    assert all(k.startswith(("transformer.transformer_blocks.", "transformer.single_transformer_blocks.")) for k in keys), keys
    pipe = local_pipeline(tiny_hunyuan_video.diffusers_dir)
    before = _video(pipe)
    assert lora_load_problems(pipe, tmp_path / "out" / "lora.safetensors") == []
    assert np.abs(_video(pipe) - before).max() > 1e-3


def test_embedding_from_clips_trains_new_tokens_in_the_llama_and_clip(tiny_hunyuan_video, tmp_path):
    """OneTrainer's HunyuanVideo EMBEDDING: new tokens in the Llama and CLIP-L train on clips; the
    file holds OneTrainer's keys (llama, clip_l); a sample with the embedding is a clip."""
    from safetensors.torch import load_file

    from ot_gradio.models.hunyuan_video import HunyuanVideo

    data = write_clips_and_an_image(tmp_path / "clips", "a photo of <embedding>, " + PROMPT)
    config = imported(PRESETS_DIR / "hunyuan-video-lora.json", tiny_hunyuan_video.diffusers_dir, data, tmp_path, "emb.safetensors",
                      resolution="64", frames="5", epochs=1, learning_rate=0.05, train_dtype="FLOAT_32", training_method="EMBEDDING",
                      output_model_format="SAFETENSORS", embedding={"token_count": 2, "initial_embedding_text": "square"},
                      samples=[{"prompt": "a photo of <embedding>", "height": 64, "width": 64, "diffusion_steps": 2}],
                      sample_after=1, sample_after_unit="EPOCH")
    _, events = run_until_done(config, tmp_path)
    vectors = load_file(str(tmp_path / "out" / "emb.safetensors"))
    assert sorted(vectors) == ["clip_l", "llama"] and all(v.shape[0] == 2 for v in vectors.values())
    model = HunyuanVideo.load(str(tiny_hunyuan_video.diffusers_dir))
    ids = model.tokenizers["text_encoder"]("square", add_special_tokens=False).input_ids[:2]
    start = model.text_encoder.get_input_embeddings().weight[ids].detach().float()
    assert start.shape == vectors["llama"].shape and not torch.allclose(vectors["llama"].float(), start)
    assert [e for e in events if e["type"] == "sample" and e["path"].endswith(".mp4")]
