"""What only Wan 2.2 TI2V 5B does: `image_to_video_share` of its clips start from their own first
frame as WanImageToVideoPipeline runs the model (`expand_timesteps`: the image's latents in place of
the first noisy frame, per-token timesteps that are 0 there), that frame is left out of the loss,
and a sample with a control image starts from it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ot_gradio.training.first_frame import draw_given, with_first_frame, without_first_frame


@pytest.fixture(scope="module")
def ti2v():
    from ot_gradio.models.tiny.wan import tiny_wan_components
    from ot_gradio.models.wan_ti2v import Wan22TI2V5B

    return Wan22TI2V5B(tiny_wan_components(0, "2.2"))


@pytest.fixture
def share(ti2v):
    def set_share(value: float) -> None:
        ti2v.image_to_video_share = value

    yield set_share
    ti2v.image_to_video_share = 0.0


def test_the_first_frame_is_the_image_the_pipeline_starts_from(ti2v):
    from diffusers import WanImageToVideoPipeline

    clip = torch.rand(2, 3, 9, 64, 64) * 2 - 1
    first = ti2v.encode_conditioning(clip)
    pipe = WanImageToVideoPipeline(**{k: getattr(ti2v.pipeline(), k) for k in ("tokenizer", "text_encoder", "vae", "scheduler", "transformer")},
                                   expand_timesteps=True)
    _, condition, mask = pipe.prepare_latents(clip[:1, :, 0], 1, 48, 64, 64, 9, torch.float32, "cpu", torch.Generator().manual_seed(0))
    assert first.shape == (2, 48, 1, 4, 4) and condition.shape == (1, 48, 1, 4, 4)
    torch.testing.assert_close(first[:1], condition, atol=1e-5, rtol=1e-5)
    # the causal VAE encodes a clip's first frame alone: the clip's own first latent frame is the same
    torch.testing.assert_close(first, ti2v.encode_images(clip, sample=False)[:, :, :1], atol=1e-5, rtol=1e-5)
    assert mask.shape == (1, 1, 3, 4, 4) and bool((mask[:, :, 0] == 0).all()) and bool((mask[:, :, 1:] == 1).all())


def test_clips_that_start_from_their_first_frame_get_the_pipelines_per_token_timesteps(ti2v):
    noisy = torch.randn(3, 48, 3, 4, 4)
    timestep = torch.tensor([900.0, 500.0, 100.0])
    assert ti2v.transformer_timestep(noisy, timestep, SimpleNamespace(given_first_frame=None)) is timestep
    per_token = ti2v.transformer_timestep(noisy, timestep, SimpleNamespace(given_first_frame=torch.tensor([True, False, True])))
    mask = torch.ones(3, 4, 4)  # WanImageToVideoPipeline: first_frame_mask[0][0][:, ::2, ::2] * t, flattened
    mask[0] = 0
    for row, t in enumerate(timestep):
        expected = (mask[:, ::2, ::2] * t).flatten() if row != 1 else torch.full((12,), float(t))
        assert torch.equal(per_token[row], expected), row
    # the transformer reads them: a clean first frame at 0 predicts differently than at the clip's t
    text = ti2v.encode_text(["a cat"] * 3)
    t = timestep / 1000
    given = ti2v.predict(noisy, t, text, SimpleNamespace(given_first_frame=torch.tensor([True, False, True])))
    plain = ti2v.predict(noisy, t, text, SimpleNamespace(given_first_frame=None))
    torch.testing.assert_close(given[1], plain[1])
    assert not torch.allclose(given[0], plain[0])


def test_who_starts_from_the_first_frame_is_drawn_per_clip_and_never_for_an_image():
    clips = torch.zeros(4, 48, 3, 2, 2)
    assert draw_given(clips, 0.0, lambda n: torch.zeros(n)) is None
    assert draw_given(torch.zeros(4, 48, 1, 2, 2), 1.0, lambda n: torch.zeros(n)) is None  # images: one latent frame
    assert draw_given(torch.zeros(4, 48, 2, 2), 1.0, lambda n: torch.zeros(n)) is None  # an image family's latents
    assert draw_given(clips, 1.0, lambda n: pytest.fail("share 1 draws nothing")).tolist() == [True] * 4
    assert draw_given(clips, 0.5, lambda n: torch.tensor([0.1, 0.7, 0.4, 0.9])).tolist() == [True, False, True, False]
    assert draw_given(clips, 0.5, lambda n: torch.full((n,), 0.9)) is None


def test_the_loss_counts_the_frames_after_a_given_one_as_their_mean():
    pred = torch.randn(2, 4, 3, 2, 2, requires_grad=True)
    target = torch.randn(2, 4, 3, 2, 2)
    rows = torch.tensor([True, False])
    new_target, weights = without_first_frame(pred, target, rows, torch.tensor([1.0, 2.0]))
    assert torch.equal(new_target[1], target[1]) and torch.equal(new_target[0, :, 1:], target[0, :, 1:])
    per_sample = ((pred - new_target) ** 2).mean(dim=(1, 2, 3, 4)) * weights
    torch.testing.assert_close(per_sample[0], ((pred[0, :, 1:] - target[0, :, 1:]) ** 2).mean())
    torch.testing.assert_close(per_sample[1], 2 * ((pred[1] - target[1]) ** 2).mean())
    per_sample.sum().backward()
    assert bool((pred.grad[0, :, 0] == 0).all()) and bool((pred.grad[1, :, 0] != 0).any())
    noisy = torch.randn(2, 4, 3, 2, 2)
    first = torch.randn(2, 4, 1, 2, 2)
    given = with_first_frame(noisy, first, rows)
    assert torch.equal(given[0, :, :1], first[0]) and torch.equal(given[1], noisy[1]) and torch.equal(given[0, :, 1:], noisy[0, :, 1:])


def test_a_training_step_gives_the_clean_first_frame_from_cache_or_pixels(ti2v, share):
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import DiffusionStep

    clip = torch.rand(2, 3, 9, 64, 64) * 2 - 1
    latents = ti2v.encode_images(clip, generator=torch.Generator().manual_seed(0))
    noise = torch.randn(latents.shape, generator=torch.Generator().manual_seed(1))
    config = TrainConfig(model_type="WAN_2_2_TI2V_5B")
    step = DiffusionStep(ti2v, config, torch.device("cpu"), Precision("FLOAT_32", torch.device("cpu")), noise_fn=lambda _: (noise, torch.tensor([700, 300])))
    seen = []
    hook = ti2v.transformer.register_forward_pre_hook(lambda _m, _a, kw: seen.append((kw["hidden_states"], kw["timestep"])), with_kwargs=True)

    def loss(**fields):
        batch = SimpleNamespace(**{"latents": latents, "pixels": None, "mask": None, "captions": ["a cat", "a dog"],
                                   "loss_weights": torch.ones(2), "conditioning_latents": None, **fields})
        with torch.no_grad():
            return float(step.loss(batch)), batch

    try:
        share(0.0)
        plain, batch = loss()
        assert batch.given_first_frame is None and seen[-1][1].shape == (2,)
        share(1.0)
        cached, batch = loss(conditioning_latents=ti2v.encode_conditioning(clip))
        hidden, timestep = seen[-1]
        assert batch.given_first_frame.tolist() == [True, True] and timestep.shape == (2, 12)
        torch.testing.assert_close(hidden[:, :, :1], ti2v.encode_conditioning(clip))
        assert torch.equal(timestep[:, :4], torch.zeros(2, 4)) and torch.equal(timestep[:, 4:], torch.tensor([[701.0], [301.0]]).expand(2, 8))
        from_pixels, _ = loss(pixels=clip)
        torch.testing.assert_close(seen[-1][0], hidden)
        assert from_pixels == pytest.approx(cached) and cached != pytest.approx(plain)
    finally:
        hook.remove()


def test_a_sample_starts_from_its_control_image_else_from_the_prompt(ti2v, tmp_path):
    from PIL import Image

    from tests.video_clips import write_clip

    made = []
    pipeline = ti2v.pipeline

    def noting():
        pipe = pipeline()
        call, name = pipe.__call__, type(pipe).__name__
        pipe.__class__ = type("Noting", (type(pipe),), {"__call__": lambda self, **kw: made.append((name, self.config.get(
            "expand_timesteps"), kw.get("image"))) or call(**kw)})
        return pipe

    ti2v.pipeline = noting
    try:
        frames = ti2v.sample("a cat", height=64, width=64, steps=1)
        assert made[-1] == ("WanPipeline", False, None) and len(frames) == 5
        wide = Image.new("RGB", (128, 64), (0, 0, 255))
        wide.paste((255, 0, 0), (32, 0, 96, 64))  # red in the middle half: what a cut to a square keeps
        frames = ti2v.sample("a cat", height=64, width=64, steps=2, control_image=wide)
        name, expand, image = made[-1]
        assert (name, expand, image.size) == ("WanImageToVideoPipeline", True, (64, 64)) and image.getpixel((4, 32))[0] > 200
        assert frames[0].getpixel((32, 32))[0] > frames[0].getpixel((32, 32))[2]  # the clip starts red, as its image
        write_clip(tmp_path / "clip.mp4", frames=5, size=(64, 64), seed=0)
        ti2v.default_control_image = str(tmp_path / "clip.mp4")  # what the trainer sets with a share of 1
        ti2v.sample("a cat", height=64, width=64, steps=1)
        assert made[-1][0] == "WanImageToVideoPipeline" and made[-1][2].size == (64, 64)
    finally:
        del ti2v.pipeline
        ti2v.default_control_image = None


def test_the_pre_run_check_takes_a_samples_control_image_and_the_share_is_a_fraction(tmp_path):
    from pydantic import ValidationError

    from ot_gradio.config.doctor import errors
    from ot_gradio.config.validation import validate

    sample = {"prompt": "x", "control_image": str(tmp_path / "missing.png")}
    found = errors(validate({"model_type": "WAN_2_2_TI2V_5B", "samples": [sample]}))
    assert f"samples[0].control_image: file '{tmp_path / 'missing.png'}' does not exist." in found
    (tmp_path / "missing.png").write_bytes(b"png")
    assert not [e for e in errors(validate({"model_type": "WAN_2_2_TI2V_5B", "samples": [sample]})) if "control_image" in e]
    with pytest.raises((ValidationError, ValueError), match="image_to_video_share"):
        validate({"model_type": "WAN_2_2_TI2V_5B", "image_to_video_share": 1.5})
