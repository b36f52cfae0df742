"""SD 2.0 depth: what it does beyond SD 2 (the shared SD checks are the parametrized rows). Its
inputs are the depth pipeline's: the same prompt embeddings, the same depth map (the model's DPT
run on the image, resized to latent size, scaled to [-1, 1]), beside the noisy latents."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from ot_gradio.models.sd2_depth import StableDiffusion20Depth
from tests.models.family_checks import family_fixtures

tiny_depth_paths, depth_model = family_fixtures("sd2-depth", StableDiffusion20Depth, "tiny_depth_paths", "depth_model")


def _pixels(n=2, height=64, width=48):
    torch.manual_seed(3)
    return torch.rand(n, 3, height, width) * 2 - 1


def test_file_metadata_names_the_depth_model(depth_model):
    from ot_gradio.training.output_metadata import architecture

    assert (depth_model.prediction_type, depth_model.lora_base_model_version) == ("epsilon", "sd_v2")
    assert architecture(depth_model, "lora") == "stable-diffusion-v2-depth/lora"  # OneTrainer's model spec


def test_prompts_are_encoded_as_the_depth_pipeline_encodes_them(depth_model):
    pipe = depth_model.pipeline()
    ours = depth_model.encode_text(["a red circle"])["encoder_hidden_states"]
    theirs, _ = pipe.encode_prompt("a red circle", "cpu", 1, False)
    assert torch.equal(ours, theirs)


def test_depth_maps_are_the_pipelines(depth_model):
    pixels = _pixels()
    ours = depth_model.encode_conditioning(pixels)
    images = [Image.fromarray(((p + 1) * 127.5).round().byte().permute(1, 2, 0).numpy()) for p in pixels]
    theirs = depth_model.pipeline().prepare_depth_map(images, None, 2, False, torch.float32, torch.device("cpu"))
    assert ours.shape == (2, 1, 8, 6) and torch.allclose(ours, theirs, atol=1e-5)
    assert ours.amin().item() == pytest.approx(-1) and ours.amax().item() == pytest.approx(1)


def test_the_unet_gets_the_depth_map_beside_the_latents_cached_or_from_pixels(depth_model, monkeypatch):
    pixels = _pixels()
    latents = torch.randn(2, 4, 8, 6)
    depth = depth_model.encode_conditioning(pixels)
    hidden = depth_model.encode_text(["a", "b"])
    seen = []
    monkeypatch.setattr(depth_model.unet, "forward", lambda x, *a, **k: seen.append(x) or SimpleNamespace(sample=x[:, :4]))
    depth_model.predict(latents, torch.tensor([5, 9]), hidden, SimpleNamespace(conditioning_latents=depth))
    depth_model.predict(latents, torch.tensor([5, 9]), hidden, SimpleNamespace(pixels=pixels))
    assert all(x.shape == (2, 5, 8, 6) and torch.equal(x[:, :4], latents) for x in seen)
    assert torch.equal(seen[0][:, 4:], depth) and torch.equal(seen[1][:, 4:], depth)
    with pytest.raises(ValueError, match="depth map has shape"):
        depth_model.predict(latents, torch.tensor([5, 9]), hidden, SimpleNamespace(conditioning_latents=depth[:1]))


def test_every_image_has_a_depth_map_key_apart_from_masked_images():
    from ot_gradio.data.batches import conditioning_key

    cache = SimpleNamespace(key=lambda *args, extra=None: (args, extra))
    item = SimpleNamespace(path="a.png", file_size=1, mtime_ns=1, mask_path=None, mask_from_alpha=False, depth_path=None, condlabel_path=None)
    variant = SimpleNamespace(bucket=(8, 8), crop=None, flip=False, resolution=8, augment=None)
    assert conditioning_key(cache, item, variant) is None  # no mask, no masked image
    assert conditioning_key(cache, item, variant, "depth") == (("a.png", 1, 1, (8, 8), None, False, 8, None), {"depth": "estimated"})


def test_a_saved_diffusers_folder_loads_in_the_depth_pipeline_with_its_estimator(depth_model, tmp_path):
    from diffusers import StableDiffusionDepth2ImgPipeline

    depth_model.save_diffusers(tmp_path / "saved", None)
    pipe = StableDiffusionDepth2ImgPipeline.from_pretrained(str(tmp_path / "saved"), local_files_only=True)
    saved, ours = pipe.depth_estimator.state_dict(), depth_model.depth_estimator.state_dict()
    assert saved.keys() == ours.keys() and all(torch.equal(saved[k], ours[k]) for k in ours)
    assert pipe.unet.config.in_channels == 5 and pipe.feature_extractor.size == depth_model.feature_extractor.size


def _depth_folder(tmp_path):
    """a.png with a 16-bit depth map of twice its size beside it (white = near on the left), b.png without."""
    folder = tmp_path / "c"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in ("a.png", "b.png"):
        Image.fromarray(rng.integers(0, 255, (64, 96, 3), dtype=np.uint8)).save(folder / name)
    Image.fromarray(np.tile(np.linspace(65535, 0, 192), (128, 1)).astype(np.uint16)).save(folder / "a-depth.png")
    return folder


def test_a_depth_file_beside_an_image_is_its_depth_map_cached_or_not(depth_model, tmp_path):
    """`a-depth.png` is a's depth map (not a training image), cut like a and made what the pipeline's
    `prepare_depth_map` makes of a given map; b's is estimated. Cached (its key holds the file:
    editing it encodes again) or made in the step from the batch."""
    import os

    from ot_gradio.config.concept import ConceptConfig
    from ot_gradio.data import build_dataset
    from ot_gradio.data.batches import conditioning_key, render_depth, render_pixels
    from ot_gradio.data.scan import scan_concept

    folder = _depth_folder(tmp_path)
    concept = ConceptConfig(path=str(folder), name="c")
    assert len(scan_concept(concept).items) == 3  # another model type: `-depth` files are images
    pipe = depth_model.pipeline()

    def build(caching):
        return build_dataset([concept], "64", 1, latent_caching=caching, cache_dir=tmp_path / "cache", vae_id="v",
                             encode_fn=lambda p: torch.nn.functional.avg_pool2d(p, 8), conditioning_fn=depth_model.encode_conditioning,
                             conditioning_kind="depth", depth=True)

    def expected(item, variant):
        pixels = render_pixels(item, variant)[None]
        if item.depth_path is None:
            return depth_model.encode_conditioning(pixels)
        given = render_depth(item, variant)
        return pipe.prepare_depth_map(pixels, given, 1, False, torch.float32, torch.device("cpu"))

    cached, stepped = build(True), build(False)
    items = cached.concepts[0].items
    assert [(i.relpath, i.depth_path and i.depth_path.name) for i in items] == [("a.png", "a-depth.png"), ("b.png", None)]
    assert cached.concepts[0].scan.depth_count == 1
    noisy = {}
    for dataset in (cached, stepped):
        for batch, samples in zip(dataset.epoch_batches(0), dataset.plan(0).batches, strict=True):
            item = dataset.concepts[0].items[samples[0].item]
            want = expected(item, samples[0].variant)
            noisy.setdefault(item.relpath, torch.zeros(1, 4, *want.shape[-2:]))
            got = depth_model.conditioning_input(noisy[item.relpath], batch)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
            if item.depth_path is not None:
                assert got[0, 0, :, 0].min() > 0.9 and got[0, 0, :, -1].max() < -0.9  # near (white) on the left
                assert not torch.allclose(got, depth_model.encode_conditioning(render_pixels(item, samples[0].variant)[None]), atol=0.1)
    (a, variant), = {(items[0], s.variant) for b in cached.plan(0).batches for s in b if s.item == 0}
    before = conditioning_key(cached.cache, a, variant, "depth")
    Image.fromarray(np.tile(np.linspace(0, 65535, 192), (128, 1)).astype(np.uint16)).save(folder / "a-depth.png")
    os.utime(folder / "a-depth.png", ns=(1, 1))
    again = build(True)
    assert conditioning_key(again.cache, again.concepts[0].items[0], variant, "depth") != before
    assert (again.cache_report.conditioning_hits, again.cache_report.conditioning_encoded) == (1, 1)  # b's is kept
