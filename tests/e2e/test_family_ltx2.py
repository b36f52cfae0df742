"""LTX-2 end to end on the tiny model: a LoRA from our preset trained in a worker process from a
folder of three short generated clips and one image, that LTX2Pipeline reloads with
`load_lora_weights` (nothing ignored) and that changes its video; the run's sample is a clip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import clip_run, imported, local_pipeline, lora_load_problems, tiny_fixture
from tests.video_clips import write_clips_and_an_image

pytestmark = pytest.mark.slow
PROMPT = "a yellow square moving"

tiny_ltx2 = tiny_fixture("ltx2", "tiny_ltx2")


def _video(pipe) -> np.ndarray:
    """The pipeline's video latents for a fixed seed (CFG alone, as our samples)."""
    return pipe(PROMPT, height=32, width=32, num_frames=9, num_inference_steps=2, guidance_scale=4.0, stg_scale=0.0,
                modality_scale=1.0, guidance_rescale=0.0, audio_stg_scale=0.0, audio_modality_scale=1.0, audio_guidance_rescale=0.0,
                spatio_temporal_guidance_blocks=None, max_sequence_length=64, generator=torch.Generator().manual_seed(0),
                output_type="latent").frames.float().numpy()


def test_lora_from_clips_and_an_image_reloads_in_the_ltx2_pipeline(tiny_ltx2, tmp_path):
    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    # our preset with only the base model, the data, the output and the run's size and token
    # window changed (its FLOAT_8 transformer and Gemma and bfloat16 VAE kept)
    config = imported(PRESETS_DIR / "ltx2-lora.json", tiny_ltx2.diffusers_dir, data, tmp_path, "lora.safetensors",
                      resolution="64", frames="9", epochs=1, learning_rate=5e-2, lora_rank=4, lora_alpha=4.0, latent_caching=True,
                      text_encoder_sequence_length=64, sample_after=1, sample_after_unit="EPOCH",
                      samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}])
    assert (config["model_type"], config["output_model_format"], config["layer_filter_preset"]) == ("LTX_2", "DIFFUSERS_LORA", "attn-mlp")
    _, keys = clip_run(config, tmp_path, frames=9)  # the samples are clips of the run's 9 frames
    layers = {k.split(".lora_")[0].split(".", 3)[-1] for k in keys}  # the video layers of each block, no audio one
    assert {"attn1.to_q", "attn2.to_k", "audio_to_video_attn.to_v", "ff.net.2"} <= layers, sorted(layers)
    assert not [k for k in keys if "audio_attn" in k or "audio_ff" in k or "video_to_audio" in k]
    pipe = local_pipeline(tiny_ltx2.diffusers_dir)
    before = _video(pipe)
    assert lora_load_problems(pipe, tmp_path / "out" / "lora.safetensors") == []
    assert np.abs(_video(pipe) - before).max() > 1e-3
