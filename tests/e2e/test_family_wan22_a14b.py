"""Wan 2.2 T2V A14B end to end on the tiny model: a LoRA of the low-noise expert from our preset,
trained in this process from clips and an image, sees only that expert's range of t, leaves the
high-noise expert as it was, draws its sample with both, and WanPipeline loads it into
`transformer_2` (load_into_transformer_2, nothing ignored), where it changes the video."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, tiny_fixture, train_in_process, video_latents
from tests.video_clips import write_clips_and_an_image

pytestmark = pytest.mark.slow
PROMPT = "a yellow square moving"

tiny_wan22_a14b = tiny_fixture("wan22-a14b", "tiny_wan22_a14b")


def test_a_low_noise_expert_lora_trains_in_its_range_and_loads_into_transformer_2(tiny_wan22_a14b, tmp_path, monkeypatch):
    from safetensors import safe_open

    from ot_gradio.models.wan import Wan22T2VA14B

    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    config = imported(PRESETS_DIR / "wan22-t2v-a14b-lora.json", tiny_wan22_a14b.diffusers_dir, data, tmp_path, "lora.safetensors",
                      trained_expert="LOW_NOISE", resolution="64", frames="5", epochs=1, learning_rate=5e-2, lora_rank=4,
                      lora_alpha=4.0, latent_caching=True, sample_after=1, sample_after_unit="EPOCH",
                      samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}],
                      timestep_shift=20.0)  # most draws would fall in the high-noise range but for the expert's range
    assert (config["model_type"], config["output_model_format"]) == ("WAN_2_2_T2V_A14B", "COMFY_LORA")
    config["output_model_format"] = "DIFFUSERS_LORA"  # the expert's layers loaded into the pipeline's transformer_2
    seen_t, sampled = [], []
    predict, sample = Wan22T2VA14B.predict, Wan22T2VA14B.sample
    monkeypatch.setattr(Wan22T2VA14B, "predict", lambda self, noisy, t, *a, **k: seen_t.append(t.clone()) or predict(self, noisy, t, *a, **k))

    def sample_and_note(self, *args, **kwargs):  # the idle expert runs too: the first of 2 steps is at t = 1
        hooks = [m.register_forward_hook(lambda *_, name=name: sampled.append(name))
                 for name, m in (("high", self.idle_expert), ("low", self.transformer))]
        try:
            return sample(self, *args, **kwargs)
        finally:
            for h in hooks:
                h.remove()

    monkeypatch.setattr(Wan22T2VA14B, "sample", sample_and_note)

    trainer, _ = train_in_process(config, tmp_path)
    t = torch.cat([t for t in seen_t if t.device.type != "meta"])  # not the memory planner's probe
    assert len(t) == 4 and bool((t * 1000 < 875).all())  # 3 clips + 1 image, each in the low-noise range only
    assert {"high", "low"} <= set(sampled)
    model = trainer.model
    original = Wan22T2VA14B.load(str(tiny_wan22_a14b.diffusers_dir), offline=True)
    idle = model.idle_expert.state_dict()
    assert all(torch.equal(idle[k].float(), v.float()) for k, v in original.experts["HIGH_NOISE"].state_dict().items())

    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        keys = list(f.keys())
        assert all(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)
        assert f.metadata()["ss_base_model_version"] == "wan_2_2_t2v_a14b_low_noise"  # the header names the expert
    assert keys and all(k.startswith("transformer.blocks.") for k in keys), keys
    pipe = local_pipeline(tiny_wan22_a14b.diffusers_dir)
    before = video_latents(pipe, PROMPT, guidance_scale=1.0)
    assert lora_load_problems(pipe, out, load_into_transformer_2=True) == []
    assert not any("lora" in name for name, _ in pipe.transformer.named_parameters())  # the high-noise expert is untouched
    assert any("lora_B" in name for name, _ in pipe.transformer_2.named_parameters())
    assert np.abs(video_latents(pipe, PROMPT, guidance_scale=1.0) - before).max() > 1e-3
