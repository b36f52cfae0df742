"""What only Wan 2.2 I2V A14B does: its transformers read each clip's first frame as
WanImageToVideoPipeline gives it (the mask and the first frame's latents beside the noisy ones),
the same from the latent cache as without it, and a text-to-video folder is refused as it (and the reverse)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(scope="module")
def i2v():
    from ot_gradio.models.tiny.wan import tiny_wan_i2v_components
    from ot_gradio.models.wan_i2v import Wan22I2VA14B

    return Wan22I2VA14B(tiny_wan_i2v_components())


def test_the_first_frame_is_read_as_the_pipeline_prepares_it(i2v):
    clip = torch.rand(2, 3, 9, 32, 32) * 2 - 1
    first = i2v.encode_conditioning(clip)
    pipe = i2v.pipeline()
    _, condition = pipe.prepare_latents(clip[:1, :, 0], 1, 16, 32, 32, 9, torch.float32, "cpu", torch.Generator().manual_seed(0))
    assert first.shape == (2, 16, 3, 4, 4) and condition.shape == (1, 20, 3, 4, 4)
    torch.testing.assert_close(first[:1], condition[:, 4:], atol=1e-5, rtol=1e-5)
    assert torch.equal(i2v.first_frame_mask(first)[:1], condition[:, :4])
    later = clip.clone()
    later[:, :, 1:] = torch.rand_like(later[:, :, 1:])  # only the first frame is read
    assert torch.equal(i2v.encode_conditioning(later), first)


def test_the_transformer_reads_noise_mask_and_first_frame_and_the_cache_gives_what_the_pixels_give(i2v):
    clip = torch.rand(1, 3, 5, 32, 32) * 2 - 1
    noisy = torch.randn(1, 16, 2, 4, 4)
    t = torch.tensor([0.95])
    text = i2v.encode_text(["a cat"])
    seen = []
    hook = i2v.transformer.register_forward_pre_hook(lambda _m, _a, kwargs: seen.append(kwargs["hidden_states"]), with_kwargs=True)
    try:
        from_pixels = i2v.predict(noisy, t, text, SimpleNamespace(pixels=clip))
        cached = i2v.predict(noisy, t, text, SimpleNamespace(conditioning_latents=i2v.encode_conditioning(clip)))
    finally:
        hook.remove()
    torch.testing.assert_close(from_pixels, cached)
    assert from_pixels.shape == noisy.shape
    hidden = seen[0]
    assert hidden.shape == (1, 36, 2, 4, 4) and torch.equal(hidden[:, :16], noisy)
    assert bool((hidden[:, 16:20, 0] == 1).all()) and bool((hidden[:, 16:20, 1:] == 0).all())
    other_start = clip.clone()
    other_start[:, :, 0] = -clip[:, :, 0]
    assert not torch.allclose(i2v.predict(noisy, t, text, SimpleNamespace(pixels=other_start)), from_pixels)


def test_a_sample_starts_from_the_image_given_fitted_to_its_size_else_the_first_training_clip(i2v, tmp_path):
    from PIL import Image

    from tests.video_clips import write_clip

    given = []
    pipeline = i2v.pipeline

    def noting():
        pipe = pipeline()
        call = pipe.__call__
        pipe.__class__ = type("Noting", (type(pipe),), {"__call__": lambda self, **kw: given.append(kw["image"]) or call(**kw)})
        return pipe

    i2v.pipeline = noting
    try:
        wide = Image.new("RGB", (64, 32), (0, 0, 255))
        wide.paste((255, 0, 0), (16, 0, 48, 32))  # red in the middle half: what a cut to a square keeps
        frames = i2v.sample("a cat", height=32, width=32, steps=2, control_image=wide)
        assert len(frames) == 5 and frames[0].size == (32, 32)
        assert given[-1].size == (32, 32) and given[-1].getpixel((2, 16))[0] > 200  # cut, not stretched
        with pytest.raises(ValueError, match="samples start from an image"):
            i2v.sample("a cat", height=32, width=32, steps=1)
        write_clip(tmp_path / "clip.mp4", frames=5, seed=0)
        i2v.default_control_image = str(tmp_path / "clip.mp4")  # what the trainer sets: the first training clip
        i2v.sample("a cat", height=32, width=32, steps=1)
        assert given[-1].size == (32, 32)
    finally:
        del i2v.pipeline
        i2v.default_control_image = None


def test_a_text_to_video_folder_is_refused_as_image_to_video_and_the_reverse():
    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.tiny.wan import tiny_wan_components, tiny_wan_i2v_components, tiny_wan_transformer
    from ot_gradio.models.wan import Wan21, Wan22T2VA14B
    from ot_gradio.models.wan_i2v import Wan22I2VA14B

    with pytest.raises(ModelLoadError, match="a text-to-video Wan model.*pick WAN_2_2_T2V_A14B"):
        Wan22I2VA14B({**tiny_wan_components(), "transformer_2": tiny_wan_transformer(1)})
    with pytest.raises(ModelLoadError, match="image-to-video Wan model.*pick the model type WAN_2_2_I2V_A14B"):
        Wan22T2VA14B(tiny_wan_i2v_components())
    wan21_i2v = tiny_wan_transformer(0, in_channels=36, image_dim=32, added_kv_proj_dim=24)  # Wan 2.1 I2V's: CLIP image embeddings
    with pytest.raises(ModelLoadError, match="pick the model type WAN_2_1_I2V"):
        Wan21({**tiny_wan_components(), "transformer": wan21_i2v})
    with pytest.raises(ModelLoadError, match="a Wan 2.1 I2V model; pick WAN_2_1_I2V"):
        Wan22I2VA14B({**tiny_wan_components(), "transformer": wan21_i2v, "transformer_2": wan21_i2v})
