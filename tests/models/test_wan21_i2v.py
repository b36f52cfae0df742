"""What only Wan 2.1 I2V does beside Wan 2.2 I2V A14B's first frame (test_wan_i2v.py): its
transformer also reads the first frame's CLIP image embeddings, made as WanImageToVideoPipeline
makes them, the same from the latent cache as from the pixels; a cache entry holds both tensors;
its text window is 512 tokens; and the other Wan folders are refused as it (and it as them)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def i2v():
    from ot_gradio.models.tiny.wan import tiny_wan21_i2v_components
    from ot_gradio.models.wan21_i2v import Wan21I2V

    return Wan21I2V(tiny_wan21_i2v_components())


def as_image(frame: torch.Tensor):
    from PIL import Image

    return Image.fromarray(((frame.permute(1, 2, 0) + 1) * 127.5).round().to(torch.uint8).numpy())


def test_the_first_frame_and_its_clip_embeddings_are_what_the_pipeline_makes(i2v):
    clip = torch.rand(2, 3, 9, 32, 32) * 2 - 1
    out = i2v.encode_conditioning(clip)
    assert set(out) == {"latent", "image_embeds"} and out["latent"].shape == (2, 16, 3, 4, 4) and out["image_embeds"].shape == (2, 5, 32)
    pipe = i2v.pipeline()
    _, condition = pipe.prepare_latents(clip[:1, :, 0], 1, 16, 32, 32, 9, torch.float32, "cpu", torch.Generator().manual_seed(0))
    torch.testing.assert_close(out["latent"][:1], condition[:, 4:], atol=1e-5, rtol=1e-5)
    for i in range(2):  # the pipeline's encode_image of the start image (8-bit RGB): the penultimate layer, after its processor
        torch.testing.assert_close(out["image_embeds"][i: i + 1], pipe.encode_image(as_image(clip[i, :, 0]), "cpu"), atol=1e-5, rtol=1e-5)
    later = clip.clone()
    later[:, :, 1:] = torch.rand_like(later[:, :, 1:])  # only the first frame is read
    assert torch.equal(i2v.encode_conditioning(later)["image_embeds"], out["image_embeds"])


def test_the_transformer_reads_the_embeddings_and_the_cache_gives_what_the_pixels_give(i2v):
    clip = torch.rand(1, 3, 5, 32, 32) * 2 - 1
    noisy, t, text = torch.randn(1, 16, 2, 4, 4), torch.tensor([0.9]), i2v.encode_text(["a cat"])
    seen = []
    hook = i2v.transformer.register_forward_pre_hook(lambda _m, _a, kwargs: seen.append(kwargs), with_kwargs=True)
    try:
        from_pixels = i2v.predict(noisy, t, text, SimpleNamespace(pixels=clip))
        encoded = i2v.encode_conditioning(clip)
        cached = i2v.predict(noisy, t, text, SimpleNamespace(conditioning_latents=encoded["latent"], image_embeds=encoded["image_embeds"]))
        other = i2v.predict(noisy, t, text, SimpleNamespace(conditioning_latents=encoded["latent"], image_embeds=-encoded["image_embeds"]))
    finally:
        hook.remove()
    torch.testing.assert_close(from_pixels, cached)
    assert seen[0]["hidden_states"].shape == (1, 36, 2, 4, 4)
    torch.testing.assert_close(seen[0]["encoder_hidden_states_image"], encoded["image_embeds"])
    assert seen[0]["encoder_hidden_states"].shape[1] == 512  # the transformer splits the image tokens off by this count
    assert not torch.allclose(other, cached)  # the embeddings are read: other embeddings, another prediction
    with pytest.raises(ValueError, match="cached CLIP image embeddings"):
        i2v.predict(noisy, t, text, SimpleNamespace(conditioning_latents=encoded["latent"]))
    probe = i2v.first_frame_inputs(SimpleNamespace(), noisy)  # the memory planner's probe: zeros of the right sizes
    assert probe[0].shape == noisy.shape and probe[1]["encoder_hidden_states_image"].shape == (1, 5, 32)


def test_a_cache_entry_holds_the_first_frame_and_its_embeddings(tmp_path):
    from ot_gradio.data.latent_cache import LatentCache

    cache = LatentCache(tmp_path, "vae")
    latent, embeds = torch.randn(16, 2, 4, 4), torch.randn(5, 32)
    key, other = "a" * 64, "b" * 64
    cache.put(key, {"latent": latent, "image_embeds": embeds})
    both = cache.load_all(key)
    assert torch.equal(both["latent"], latent) and torch.equal(both["image_embeds"], embeds)
    assert torch.equal(cache.load(key), latent)
    with pytest.raises(ValueError, match="holds a 'latent'"):
        cache.put(other, {"image_embeds": embeds})


def test_the_text_window_is_512_tokens():
    from ot_gradio.models.tiny.wan import tiny_wan21_i2v_components
    from ot_gradio.models.wan21_i2v import Wan21I2V

    model = Wan21I2V(tiny_wan21_i2v_components())
    with pytest.raises(ValueError, match="text_encoder_sequence_length: Wan 2.1 I2V reads exactly 512"):
        model.configure_flow(SimpleNamespace(text_encoder_sequence_length=256))


def test_other_wan_folders_are_refused_as_wan21_i2v_and_it_as_them():
    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.tiny.wan import tiny_wan21_i2v_components, tiny_wan_components, tiny_wan_i2v_components
    from ot_gradio.models.wan21_i2v import Wan21I2V

    with pytest.raises(ModelLoadError, match="a Wan 2.2 I2V A14B model; pick WAN_2_2_I2V_A14B"):
        Wan21I2V({**tiny_wan_i2v_components(), "transformer_2": None})
    with pytest.raises(ModelLoadError, match="a text-to-video Wan model"):
        Wan21I2V(tiny_wan_components())
    with pytest.raises(ModelLoadError, match="no image_encoder / image_processor"):
        Wan21I2V({**tiny_wan21_i2v_components(), "image_encoder": None})


def test_a_sample_encodes_the_start_image_it_is_given(i2v):
    from PIL import Image

    given = []
    pipeline = i2v.pipeline

    def noting():
        pipe = pipeline()
        encode = pipe.encode_image
        pipe.encode_image = lambda image, device=None: given.append(image) or encode(image, device)
        return pipe

    i2v.pipeline = noting
    try:
        red = Image.new("RGB", (48, 32), (220, 20, 20))
        frames = i2v.sample("a cat", height=32, width=32, steps=1, control_image=red)
    finally:
        del i2v.pipeline
    assert len(frames) == 5 and given and given[0].size == (32, 32)  # the start image, cut to the sample's size
    assert np.asarray(given[0])[..., 0].min() > 200
    with pytest.raises(ValueError, match="^Wan 2.1 I2V samples start from an image"):  # none given, no training clip
        i2v.sample("a cat", height=32, width=32, steps=1)
