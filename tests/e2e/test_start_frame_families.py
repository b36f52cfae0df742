"""The video families that run text-to-video and image-to-video with one model (Wan 2.2 TI2V 5B,
LTX-2) end to end on their tiny models: our preset with an image-to-video share of 1 trains its
clips from their cached first frames (the image trains text-to-video), samples a clip that starts
from the first training clip's first frame, and the family's image-to-video pipeline loads the file
from the model's own folder (nothing ignored), where it changes the video made from an image."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, tiny_fixture, train_in_process, video_latents
from tests.video_clips import write_clips_and_an_image

pytestmark = pytest.mark.slow
PROMPT = "a yellow square moving"

tiny_wan22_5b = tiny_fixture("wan22-5b", "tiny_wan22_5b")
tiny_ltx2 = tiny_fixture("ltx2", "tiny_ltx2")


def _wan_video(pipe, model, image) -> np.ndarray:
    return video_latents(pipe, None, guidance_scale=1.0, image=image, prompt_embeds=model.encode_text([PROMPT])["encoder_hidden_states"])


def _ltx2_video(pipe, model, image) -> np.ndarray:
    return pipe(prompt=PROMPT, image=image, height=32, width=32, num_frames=9, num_inference_steps=2, guidance_scale=4.0, stg_scale=0.0,
                modality_scale=1.0, guidance_rescale=0.0, audio_stg_scale=0.0, audio_modality_scale=1.0, audio_guidance_rescale=0.0,
                spatio_temporal_guidance_blocks=None, max_sequence_length=64, generator=torch.Generator().manual_seed(0),
                output_type="latent").frames.float().numpy()


# family: (tiny model fixture, preset, the run's changes, module and class, image-to-video pipeline, first frame's latents,
# per-token timesteps of a step, the pipeline's video latents)
FAMILIES = {
    "wan22-ti2v-5b": ("tiny_wan22_5b", "wan22-ti2v-5b-lora.json", {"frames": "5", "output_model_format": "DIFFUSERS_LORA"},
                      ("ot_gradio.models.wan_ti2v", "Wan22TI2V5B"), "WanImageToVideoPipeline", (1, 48, 1, 4, 4), (1, 2 * 2 * 2), _wan_video),
    "ltx2": ("tiny_ltx2", "ltx2-lora.json", {"frames": "9", "text_encoder_sequence_length": 64},
             ("ot_gradio.models.ltx2", "LTX2"), "LTX2ImageToVideoPipeline", (1, 4, 1, 32, 32), (1, 5 * 32 * 32), _ltx2_video),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_clips_train_from_their_first_frames_samples_start_from_the_first_clip_and_the_pipeline_loads_it(family, request, tmp_path,
                                                                                                           monkeypatch):
    import importlib

    import diffusers
    from PIL import Image

    from ot_gradio.data.video import still_image

    fixture, preset, changes, (module, name), pipeline_class, first_shape, token_shape, video = FAMILIES[family]
    tiny = request.getfixturevalue(fixture)
    family_class = getattr(importlib.import_module(module), name)
    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    config = imported(PRESETS_DIR / preset, tiny.diffusers_dir, data, tmp_path, "lora.safetensors",
                      resolution="64", epochs=1, learning_rate=5e-2, lora_rank=4, lora_alpha=4.0, latent_caching=True,
                      image_to_video_share=1.0, sample_after=1, sample_after_unit="EPOCH",
                      samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}], **changes)
    steps, starts = [], []
    per_token, fitted = family_class.per_token_timesteps, family_class.sampling_inputs

    def noting(timestep, batch, *grid):
        out = per_token(timestep, batch, *grid)
        if timestep.device.type != "meta":  # not the memory planner's probe (every clip from its first frame, no cache)
            steps.append((batch.given_first_frame, batch.conditioning_latents, tuple(out.shape)))
        return out

    monkeypatch.setattr(family_class, "per_token_timesteps", staticmethod(noting))
    monkeypatch.setattr(family_class, "sampling_inputs", lambda self, *a, **k: starts.append(self._sample_image) or fitted(self, *a, **k))

    trainer, _ = train_in_process(config, tmp_path)
    clips = [(given, first, shape) for given, first, shape in steps if given is not None]
    assert len(steps) == 4 and len(clips) == 3  # three clips from their first frames; the image text-to-video
    assert all(given.tolist() == [True] and first.shape == first_shape and shape == token_shape for given, first, shape in clips), clips
    first_clip = sorted(p for p in data.iterdir() if p.suffix == ".mp4")[0]
    assert starts and np.array_equal(np.asarray(starts[0]), np.asarray(still_image(first_clip)))
    assert list((tmp_path / "run" / "samples").rglob("*.mp4"))

    pipe = local_pipeline(tiny.diffusers_dir, getattr(diffusers, pipeline_class))
    image = Image.new("RGB", (32, 32), (240, 200, 40))
    before = video(pipe, trainer.model, image)
    assert lora_load_problems(pipe, tmp_path / "out" / "lora.safetensors") == []
    assert np.abs(video(pipe, trainer.model, image) - before).max() > 1e-3


def test_images_alone_are_told_they_train_text_to_video_and_validation_draws_the_same_clips_each_time(tiny_wan22_5b, tmp_path,
                                                                                                      monkeypatch):
    import shutil

    from ot_gradio.models.wan_ti2v import Wan22TI2V5B

    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    images = tmp_path / "images"
    images.mkdir()
    for name in ("still.png", "still.txt"):
        shutil.move(data / name, images / name)
    config = imported(PRESETS_DIR / "wan22-ti2v-5b-lora.json", tiny_wan22_5b.diffusers_dir, images, tmp_path, "lora.safetensors",
                      resolution="64", frames="5", epochs=3, lora_rank=4, latent_caching=True, validation=True, validate_after=1,
                      validate_after_unit="EPOCH")
    config["concepts"].append({"name": "held", "path": str(data), "type": "VALIDATION"})
    assert config["image_to_video_share"] == 0.5  # the preset's
    # the held-out clips: about half of them start from their first frame, the same ones at every validation
    drawn = []
    predict = Wan22TI2V5B.predict
    monkeypatch.setattr(Wan22TI2V5B, "predict", lambda self, noisy, t, c, batch=None: drawn.append(
        (batch.image_paths[0], batch.given_first_frame is not None)) or predict(self, noisy, t, c, batch))
    _, warned = train_in_process(config, tmp_path)
    assert [w for w in warned if w.startswith("image_to_video_share is 0.5 but every training item is an image")], warned
    clips = [d for d in drawn if d[0].endswith(".mp4")]
    runs = [sorted(clips[i:i + 3]) for i in range(0, len(clips), 3)]
    assert len(runs) == 3 and runs[0] == runs[1] == runs[2], runs
    assert {given for _, given in runs[0]} == {True, False}  # both kinds among them
    assert [d for d in drawn if d[0].endswith(".png")] and not [d for d in drawn if d[0].endswith(".png") and d[1]]  # the image: never
