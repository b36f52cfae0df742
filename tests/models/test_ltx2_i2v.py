"""LTX-2's image-to-video, as LTX2ImageToVideoPipeline runs the model: a clip that starts from its
first frame has that frame's latents (the image's, encoded alone) clean in place of the noise and
timestep 0 on its tokens (`t * (1 - conditioning_mask)`), and a sample with a control image starts
from it. The training step's side (the draw, the loss without the first frame) is shared with Wan 2.2
TI2V 5B and tested in test_wan_ti2v.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(scope="module")
def ltx2():
    from ot_gradio.models.ltx2 import LTX2
    from ot_gradio.models.tiny.ltx2 import tiny_ltx2_components

    return LTX2(tiny_ltx2_components())


def test_the_first_frame_and_the_timesteps_are_the_image_to_video_pipelines(ltx2):
    from diffusers import LTX2ImageToVideoPipeline

    clip = torch.rand(2, 3, 9, 64, 64) * 2 - 1
    first = ltx2.encode_conditioning(clip)
    assert first.shape == (2, 4, 1, 32, 32)
    torch.testing.assert_close(first, ltx2.encode_images(clip[:, :, 0], sample=False))
    later = clip.clone()
    later[:, :, 1:] = torch.rand_like(later[:, :, 1:])  # only the first frame is read
    assert torch.equal(ltx2.encode_conditioning(later), first)
    pipe = LTX2ImageToVideoPipeline(**{k: getattr(ltx2.pipeline(), k) for k in (
        "scheduler", "vae", "audio_vae", "text_encoder", "tokenizer", "connectors", "transformer", "vocoder")})
    latents, mask = pipe.prepare_latents(clip[:1, :, 0], 1, 4, 64, 64, 9, 0.0, torch.float32, "cpu", torch.Generator().manual_seed(0))
    tokens = 32 * 32  # a latent frame's tokens (patch 1), the first ones of the packed sequence
    assert latents.shape == (1, 5 * tokens, 4) and mask.shape == (1, 5 * tokens)
    torch.testing.assert_close(latents[:, :tokens], pipe._pack_latents(first[:1]), atol=1e-5, rtol=1e-5)
    # the transformer's timestep: the pipeline's t * (1 - conditioning_mask) for a clip that starts from its first frame
    seen = []
    hook = ltx2.transformer.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["timestep"]), with_kwargs=True)
    try:
        text = ltx2.encode_text(["a cat"] * 2)
        noisy = torch.randn(2, 4, 5, 32, 32)
        ltx2.predict(noisy, torch.tensor([0.6, 0.3]), text, SimpleNamespace(given_first_frame=torch.tensor([True, False])))
        ltx2.predict(noisy, torch.tensor([0.6, 0.3]), text, SimpleNamespace(given_first_frame=None))
    finally:
        hook.remove()
    torch.testing.assert_close(seen[0][0], 600.0 * (1 - mask[0]))
    assert torch.equal(seen[0][1], torch.full((5 * tokens,), 300.0)) and seen[1].tolist() == [600.0, 300.0]


def test_a_sample_starts_from_its_control_image_else_from_the_prompt(ltx2):
    from PIL import Image

    made = []
    pipeline = ltx2.pipeline

    def noting():
        pipe = pipeline()
        call, name = pipe.__call__, type(pipe).__name__
        pipe.__class__ = type("Noting", (type(pipe),), {"__call__": lambda self, **kw: made.append((name, kw.get("image"))) or call(**kw)})
        return pipe

    ltx2.pipeline = noting
    try:
        ltx2.sample("a cat", height=64, width=64, steps=1)
        assert made[-1] == ("LTX2Pipeline", None)
        red = Image.new("RGB", (128, 64), (0, 0, 255))
        red.paste((255, 0, 0), (32, 0, 96, 64))  # red in the middle half: what a cut to a square keeps
        frames = ltx2.sample("a cat", height=64, width=64, steps=2, control_image=red)
        name, image = made[-1]
        assert (name, image.size) == ("LTX2ImageToVideoPipeline", (64, 64)) and image.getpixel((4, 32))[0] > 200
        assert len(frames) == 9 and frames[0].size == (64, 64)
    finally:
        del ltx2.pipeline
