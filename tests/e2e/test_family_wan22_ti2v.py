"""Wan 2.2 TI2V 5B image-to-video end to end on the tiny model: our preset with an image-to-video
share of 1 trains its clips from their cached first frames (the image trains text-to-video),
samples a clip that starts from the first training clip's first frame, and WanImageToVideoPipeline
loads the file from the model's own folder (nothing ignored), where it changes the video made from an image."""

from __future__ import annotations

import numpy as np
import pytest

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, tiny_fixture, train_in_process, video_latents
from tests.video_clips import write_clips_and_an_image

pytestmark = pytest.mark.slow
PROMPT = "a yellow square moving"

tiny_wan22_5b = tiny_fixture("wan22-5b", "tiny_wan22_5b")


def test_clips_train_from_their_first_frames_samples_start_from_the_first_clip_and_the_pipeline_loads_it(tiny_wan22_5b, tmp_path, monkeypatch):
    from diffusers import WanImageToVideoPipeline
    from PIL import Image

    from ot_gradio.data.video import still_image
    from ot_gradio.models.wan_ti2v import Wan22TI2V5B

    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    config = imported(PRESETS_DIR / "wan22-ti2v-5b-lora.json", tiny_wan22_5b.diffusers_dir, data, tmp_path, "lora.safetensors",
                      resolution="64", frames="5", epochs=1, learning_rate=5e-2, lora_rank=4, lora_alpha=4.0, latent_caching=True,
                      image_to_video_share=1.0, output_model_format="DIFFUSERS_LORA", sample_after=1, sample_after_unit="EPOCH",
                      samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}])
    steps, starts = [], []
    timestep, fitted = Wan22TI2V5B.transformer_timestep, Wan22TI2V5B.sampling_inputs

    def noting(self, noisy, t, batch=None):
        out = timestep(self, noisy, t, batch)
        if noisy.device.type != "meta":  # not the memory planner's probe (every clip from its first frame, no cache)
            steps.append((batch.given_first_frame, batch.conditioning_latents, tuple(out.shape)))
        return out

    monkeypatch.setattr(Wan22TI2V5B, "transformer_timestep", noting)
    monkeypatch.setattr(Wan22TI2V5B, "sampling_inputs", lambda self, *a, **k: starts.append(self._sample_image) or fitted(self, *a, **k))

    train_in_process(config, tmp_path)
    clips = [(given, first, shape) for given, first, shape in steps if given is not None]
    assert len(steps) == 4 and len(clips) == 3  # three clips from their first frames; the image text-to-video
    assert all(given.tolist() == [True] and first.shape == (1, 48, 1, 4, 4) and shape == (1, 2 * 2 * 2) for given, first, shape in clips)
    first_clip = sorted(p for p in data.iterdir() if p.suffix == ".mp4")[0]
    assert starts and np.array_equal(np.asarray(starts[0]), np.asarray(still_image(first_clip)))
    assert list((tmp_path / "run" / "samples").rglob("*.mp4"))

    out = tmp_path / "out" / "lora.safetensors"
    pipe = local_pipeline(tiny_wan22_5b.diffusers_dir, WanImageToVideoPipeline)
    assert pipe.config.expand_timesteps  # the hub folder's model_index.json says so
    inputs = {"image": Image.new("RGB", (32, 32), (240, 200, 40)), "prompt_embeds": Wan22TI2V5B(pipe.components).encode_text([PROMPT])["encoder_hidden_states"]}
    before = video_latents(pipe, None, guidance_scale=1.0, **inputs)
    assert lora_load_problems(pipe, out) == []
    assert np.abs(video_latents(pipe, None, guidance_scale=1.0, **inputs) - before).max() > 1e-3
