"""Wan's image-to-video families end to end on their tiny models (Wan 2.2 I2V A14B: a LoRA of the
high-noise expert; Wan 2.1 I2V: of its one transformer, which also reads the first frame's CLIP
image embeddings), each from our preset: trained from clips and an image with their first frames
(and embeddings) cached beside their latents, a sample that starts from the first training clip's
first frame, and WanImageToVideoPipeline loads the file (nothing ignored), where it changes the
video made from an image."""

from __future__ import annotations

import numpy as np
import pytest

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, tiny_fixture, train_in_process, video_latents
from tests.video_clips import write_clips_and_an_image

pytestmark = pytest.mark.slow
PROMPT = "a yellow square moving"

tiny_wan22_i2v = tiny_fixture("wan22-i2v-a14b", "tiny_wan22_i2v")
tiny_wan21_i2v = tiny_fixture("wan21-i2v", "tiny_wan21_i2v")
# fixture, preset, model type, the class, the LoRA header's base model version
FAMILIES = {
    "wan22-i2v-a14b": ("tiny_wan22_i2v", "wan22-i2v-a14b-lora", "WAN_2_2_I2V_A14B", "Wan22I2VA14B", "wan_2_2_i2v_a14b_high_noise"),
    "wan21-i2v": ("tiny_wan21_i2v", "wan21-i2v-14b-lora", "WAN_2_1_I2V", "Wan21I2V", "wan_2_1_i2v"),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_an_i2v_lora_trains_on_first_frames_samples_from_the_first_clip_and_loads_in_the_pipeline(name, request, tmp_path, monkeypatch):
    from PIL import Image
    from safetensors import safe_open

    import ot_gradio.models.wan21_i2v
    import ot_gradio.models.wan_i2v
    from ot_gradio.data.video import still_image

    fixture, preset, model_type, class_name, version = FAMILIES[name]
    tiny = request.getfixturevalue(fixture)
    family = getattr(ot_gradio.models.wan21_i2v if name == "wan21-i2v" else ot_gradio.models.wan_i2v, class_name)
    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    config = imported(PRESETS_DIR / f"{preset}.json", tiny.diffusers_dir, data, tmp_path, "lora.safetensors",
                      resolution="64", frames="5", epochs=1, learning_rate=5e-2, lora_rank=4, lora_alpha=4.0, latent_caching=True,
                      learning_rate_warmup_steps=0,  # (the preset's 200 would train its first steps at a rate near 0)
                      sample_after=1, sample_after_unit="EPOCH", samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}])
    assert (config["model_type"], config["output_model_format"]) == (model_type, "COMFY_LORA")
    assert config["trained_expert"] == "HIGH_NOISE"  # (the schema's default where the preset has none)
    config["output_model_format"] = "DIFFUSERS_LORA"
    firsts, embeds, starts = [], [], []
    predict, fitted = family.predict, family.sampling_inputs

    def noting(self, noisy, t, c, batch=None):
        firsts.append(getattr(batch, "conditioning_latents", None))
        embeds.append(getattr(batch, "image_embeds", None))
        return predict(self, noisy, t, c, batch)

    monkeypatch.setattr(family, "predict", noting)
    monkeypatch.setattr(family, "sampling_inputs", lambda self, *a, **k: starts.append(self._sample_image) or fitted(self, *a, **k))

    trainer, warned = train_in_process(config, tmp_path)
    cached = [f for f in firsts if f is not None]
    assert len(cached) == 4 and all(f.shape[1] == 16 and f.abs().sum() > 0 for f in cached)  # 3 clips and the image, from the cache
    clip_embeds = [e for e in embeds if e is not None]  # Wan 2.1 I2V's CLIP embeddings came from the cache with them
    assert len(clip_embeds) == (4 if name == "wan21-i2v" else 0) and all(e.shape[1:] == (5, 32) and e.abs().sum() > 0 for e in clip_embeds)
    first_clip = sorted(p for p in data.iterdir() if p.suffix == ".mp4")[0]
    assert starts and np.array_equal(np.asarray(starts[0]), np.asarray(still_image(first_clip)))
    assert list((tmp_path / "run" / "samples").rglob("*.mp4"))
    assert [w for w in warned if w.startswith("1 image(s) train as one-frame clips that start from themselves")], warned

    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        keys = list(f.keys())
        assert f.metadata()["ss_base_model_version"] == version
    assert keys and all(k.startswith("transformer.blocks.") for k in keys), keys
    assert any(".attn2.add_k_proj." in k for k in keys) == (name == "wan21-i2v")  # the image keys and values: Wan 2.1 I2V's
    pipe = local_pipeline(tiny.diffusers_dir)
    assert type(pipe).__name__ == "WanImageToVideoPipeline"
    # the prompt as WanPipeline encodes it (tests/models/test_wan_family.py): the I2V pipeline's own prompt cleaning
    # needs ftfy (diffusers 0.42 calls it unguarded there), which nothing here installs
    inputs = {"image": Image.new("RGB", (32, 32), (240, 200, 40)), "prompt_embeds": trainer.model.encode_text([PROMPT])["encoder_hidden_states"]}
    before = video_latents(pipe, None, guidance_scale=1.0, **inputs)
    assert lora_load_problems(pipe, out) == []
    assert np.abs(video_latents(pipe, None, guidance_scale=1.0, **inputs) - before).max() > 1e-3
