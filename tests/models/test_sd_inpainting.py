"""The SD 1.5 and SD 2.0 inpainting families on tiny 9-channel models: loading, the UNet's
extra inputs (mask, masked-image latents) in a training step, the latent cache, sampling, saving."""

from __future__ import annotations

import json
import os

import pytest
import torch
from PIL import Image
from safetensors import safe_open

from ot_gradio.config.concept import ConceptConfig
from ot_gradio.config.enums import DataType, ModelType, NoiseScheduler
from ot_gradio.config.families import family_info
from ot_gradio.config.schema import TrainConfig
from ot_gradio.data.batches import Batch
from ot_gradio.models.registry import get_family
from ot_gradio.models.sd_inpainting import StableDiffusion15Inpainting, StableDiffusion20Inpainting
from ot_gradio.training.device import Precision
from ot_gradio.training.diffusion import DiffusionStep

CPU = torch.device("cpu")
TINY = {ModelType.STABLE_DIFFUSION_15_INPAINTING: "tiny:sd15-inpainting", ModelType.STABLE_DIFFUSION_20_INPAINTING: "tiny:sd2-inpainting"}


@pytest.fixture(scope="session")
def inpaint_paths(tiny_dir):
    from ot_gradio.models.tiny import resolve_tiny

    return {model_type: resolve_tiny(name) for model_type, name in TINY.items()}


@pytest.fixture(scope="session")
def sd15i(inpaint_paths):
    return StableDiffusion15Inpainting.load(str(inpaint_paths[ModelType.STABLE_DIFFUSION_15_INPAINTING].diffusers_dir), offline=True)


def _same_weights(a, b) -> bool:
    for part in ("unet", "vae", "text_encoder"):
        sa, sb = getattr(a, part).state_dict(), getattr(b, part).state_dict()
        if sa.keys() != sb.keys() or not all(torch.equal(sa[k], sb[k]) for k in sa):
            return False
    return True


def _unet_inputs(model):
    """Collects what the UNet gets as its sample input."""
    seen = []
    handle = model.unet.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    return seen, handle


def _mask(n=2, size=64):
    mask = torch.zeros(n, 1, size, size)
    mask[0, :, :, : size // 2] = 1.0  # the first sample repaints its left half
    mask[1:] = 1.0  # the others: the whole image
    return mask


# ------------------------------------------------------------------ types and loading


@pytest.mark.parametrize(
    "model_type, cls, repo, lora_version",
    [
        (ModelType.STABLE_DIFFUSION_15_INPAINTING, StableDiffusion15Inpainting, "stable-diffusion-v1-5/stable-diffusion-inpainting", "sd_v1"),
        (ModelType.STABLE_DIFFUSION_20_INPAINTING, StableDiffusion20Inpainting, "stabilityai/stable-diffusion-2-inpainting", "sd_v2"),
    ],
)
def test_types_load_from_folder_and_single_file(model_type, cls, repo, lora_version, inpaint_paths, library_warnings):
    from diffusers import StableDiffusionInpaintPipeline

    assert get_family(model_type) is cls and cls.default_config_repo == repo
    info = family_info(model_type)
    assert info.implemented and info.inpainting
    paths = inpaint_paths[model_type]
    model = cls.load(TINY[model_type], offline=True)
    assert model.unet.config.in_channels == 9 and model.prediction_type == "epsilon"
    assert getattr(model, "lora_base_model_version", "sd_v1") == lora_version

    with safe_open(str(paths.single_file), "pt") as f:
        assert f.get_slice("model.diffusion_model.input_blocks.0.0.weight").get_shape()[1] == 9
    from_file = cls.load(str(paths.single_file), offline=True, config_dir=str(paths.diffusers_dir))
    assert _same_weights(model, from_file)
    # diffusers' own loader reads our single file with the inpainting configs, every tensor equal
    pipe = StableDiffusionInpaintPipeline.from_single_file(
        str(paths.single_file), config=str(paths.diffusers_dir), local_files_only=True, safety_checker=None
    )
    assert _same_weights(model, pipe)
    assert not [m for m in library_warnings if "unexpected" in m.lower() or "not used" in m.lower()]


def test_a_model_of_the_other_kind_is_a_clear_error(inpaint_paths, tiny_dir):
    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.sd2 import StableDiffusion20

    with pytest.raises(ModelLoadError, match="takes 4 input channels but STABLE_DIFFUSION_15_INPAINTING needs 9"):
        StableDiffusion15Inpainting.load("tiny:sd15", offline=True)
    folder = str(inpaint_paths[ModelType.STABLE_DIFFUSION_20_INPAINTING].diffusers_dir)
    with pytest.raises(ModelLoadError, match="takes 9 input channels but STABLE_DIFFUSION_20 needs 4"):
        StableDiffusion20.load(folder, offline=True)


def test_save_single_file_and_diffusers_round_trip(sd15i, inpaint_paths, tmp_path):
    from diffusers import StableDiffusionInpaintPipeline

    paths = inpaint_paths[ModelType.STABLE_DIFFUSION_15_INPAINTING]
    path = sd15i.save_single_file(tmp_path / "inpaint.safetensors", dtype="FLOAT_32")
    with safe_open(str(path), "pt") as f:
        assert f.metadata()["ot_gradio.model_type"] == "STABLE_DIFFUSION_15_INPAINTING"
    pipe = StableDiffusionInpaintPipeline.from_single_file(str(path), config=str(paths.diffusers_dir), local_files_only=True, safety_checker=None)
    assert _same_weights(sd15i, pipe)

    sd15i.save_diffusers(tmp_path / "folder", "FLOAT_32")
    assert json.loads((tmp_path / "folder" / "model_index.json").read_text())["_class_name"] == "StableDiffusionInpaintPipeline"
    assert _same_weights(sd15i, StableDiffusionInpaintPipeline.from_pretrained(str(tmp_path / "folder"), safety_checker=None))


# ------------------------------------------------------------------ the UNet's inputs


def test_masked_image_latents(sd15i):
    pixels = torch.rand(2, 3, 64, 64) * 2 - 1
    mask = _mask()
    expected = sd15i.encode_images(pixels * (1 - mask), sample=False)
    assert torch.allclose(sd15i.encode_conditioning(pixels, mask), expected)
    assert torch.allclose(sd15i.encode_conditioning(pixels, None)[:1], sd15i.blank_latents(8, 8), atol=1e-6)
    assert not torch.allclose(expected[0], sd15i.blank_latents(8, 8)[0])  # the unmasked half shows through


def test_predict_concatenates_latents_mask_and_masked_image(sd15i):
    pixels, mask = torch.rand(2, 3, 64, 64) * 2 - 1, _mask()
    latent_mask = torch.nn.functional.interpolate(mask, size=(8, 8), mode="area")
    batch = Batch(size=(64, 64), captions=["a", "b"], loss_weights=torch.ones(2), image_paths=["a", "b"], pixels=pixels, mask=mask, latent_mask=latent_mask)
    noisy, t = torch.randn(2, 4, 8, 8), torch.tensor([100, 700])
    seen, handle = _unet_inputs(sd15i)
    try:
        out = sd15i.predict(noisy, t, sd15i.encode_text(["a", "b"]), batch)
        plain = sd15i.predict(noisy, t, sd15i.encode_text(["a", "b"]))
    finally:
        handle.remove()
    assert out.shape == noisy.shape and plain.shape == noisy.shape
    unet_in = seen[0]
    assert unet_in.shape == (2, 9, 8, 8)
    assert torch.equal(unet_in[:, :4], noisy) and torch.equal(unet_in[:, 4:5], latent_mask)
    assert torch.allclose(unet_in[0, 5:], sd15i.encode_conditioning(pixels, mask)[0])
    assert torch.allclose(unet_in[1, 5:], sd15i.blank_latents(8, 8)[0])  # all-white mask: a blank image
    no_batch = seen[1]  # no batch: the whole image is repainted
    assert torch.equal(no_batch[:, 4:5], torch.ones(2, 1, 8, 8)) and torch.allclose(no_batch[:, 5:], sd15i.blank_latents(8, 8).expand(2, -1, -1, -1))


def _step(model, **options):
    config = TrainConfig.model_validate({"model_type": "STABLE_DIFFUSION_15_INPAINTING", **options})
    noise = lambda latents: (torch.randn(latents.shape, generator=torch.Generator().manual_seed(1)), torch.full((latents.shape[0],), 400))  # noqa: E731
    return DiffusionStep(model, config, CPU, Precision(DataType.FLOAT_32, CPU), noise)


def test_training_step_feeds_the_masks_it_trains_with(sd15i):
    """The step's latent mask (what the loss uses) and the masked images reach the UNet; a step
    that ignored the concept's masks would feed white masks and blank images."""
    pixels, mask = torch.rand(2, 3, 64, 64) * 2 - 1, _mask()

    def batch():
        return Batch(size=(64, 64), captions=["a", "b"], loss_weights=torch.ones(2), image_paths=["a", "b"], pixels=pixels, mask=mask)

    seen, handle = _unet_inputs(sd15i)
    try:
        with torch.no_grad():
            _step(sd15i, masked_training=True, unmasked_probability=0.0).loss(batch())
            _step(sd15i, masked_training=False).loss(batch())
            _step(sd15i, masked_training=True, unmasked_probability=1.0).loss(batch())
    finally:
        handle.remove()
    masked, off, unmasked = seen
    latent_mask = torch.nn.functional.interpolate(mask, size=(8, 8), mode="area")
    assert torch.equal(masked[:, 4:5], latent_mask)
    assert torch.allclose(masked[0, 5:], sd15i.encode_conditioning(pixels, mask)[0])
    blank = sd15i.blank_latents(8, 8).expand(2, -1, -1, -1)
    for whole in (off, unmasked):  # masked training off, or the unmasked_probability draw: the whole image
        assert torch.equal(whole[:, 4:5], torch.ones(2, 1, 8, 8)) and torch.allclose(whole[:, 5:], blank)


# ------------------------------------------------------------------ the latent cache


def _concept(folder):
    folder.mkdir(parents=True)
    for name, colour in (("a", (200, 30, 30)), ("b", (30, 30, 200))):
        Image.new("RGB", (64, 64), colour).save(folder / f"{name}.png")
        (folder / f"{name}.txt").write_text(f"a {name}")
    left = Image.new("L", (64, 64), 0)
    left.paste(255, (0, 0, 32, 64))
    left.save(folder / "a-masklabel.png")  # only "a" has a mask
    return ConceptConfig(name="c", path=str(folder))


def test_masked_image_latents_are_cached_and_keyed_by_the_mask(sd15i, tmp_path):
    from ot_gradio.data import build_dataset

    concept = _concept(tmp_path / "data")
    encode = lambda px: sd15i.encode_images(px, sample=False)  # noqa: E731

    def build(conditioning=True):
        return build_dataset(
            [concept], "64", 2, latent_caching=True, cache_dir=tmp_path / "cache", vae_id=sd15i.vae_id, encode_fn=encode,
            conditioning_fn=sd15i.encode_conditioning if conditioning else None,
        )

    old = build(conditioning=False)  # a cache made before (or by a non-inpainting run)
    assert old.cache_report.encoded == 2 and old.cache_report.conditioning_total == 0
    first = build()
    report = first.cache_report
    assert (report.hits, report.encoded) == (2, 0)  # the image latents are shared
    assert (report.conditioning_total, report.conditioning_hits, report.conditioning_encoded) == (1, 0, 1)
    assert build().cache_report.conditioning_hits == 1

    batch = first.epoch_batches(0)[0]
    a = batch.image_paths.index(str((tmp_path / "data" / "a.png").resolve()))
    assert batch.conditioning_latents.shape == batch.latents.shape
    assert torch.equal(batch.conditioning_latents[1 - a], torch.zeros(4, 8, 8))  # "b" has no mask
    pixels = (torch.tensor([200.0, 30.0, 30.0]) / 127.5 - 1).view(1, 3, 1, 1).expand(1, 3, 64, 64)  # "a" is plain red
    assert torch.allclose(batch.conditioning_latents[a], sd15i.encode_conditioning(pixels, batch.mask[a : a + 1])[0], atol=1e-5)

    # the step feeds the cached masked-image latents
    seen, handle = _unet_inputs(sd15i)
    try:
        with torch.no_grad():
            _step(sd15i, masked_training=True, unmasked_probability=0.0).loss(batch)
    finally:
        handle.remove()
    assert torch.equal(seen[0][a, 5:], batch.conditioning_latents[a])

    stat = os.stat(tmp_path / "data" / "a-masklabel.png")  # an edited mask is encoded again
    os.utime(tmp_path / "data" / "a-masklabel.png", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert build().cache_report.conditioning_encoded == 1


def test_condlabel_image_is_the_conditioning_image_where_there_is_one(sd15i, tmp_path):
    """custom_conditioning_image: "a" has a `-condlabel` image, which the UNet gets (as it is, not
    masked) instead of its masked image; "b" has none and keeps its masked image. Cached or not;
    the cache keys "a" by its condlabel file."""
    from ot_gradio.data import build_dataset

    folder = tmp_path / "data"
    concept = _concept(folder)
    (folder / "a-masklabel.png").rename(folder / "b-masklabel.png")  # "b" has the mask now, "a" a condlabel image
    Image.new("RGB", (64, 64), (30, 200, 30)).save(folder / "a-condlabel.png")
    encode = lambda px: sd15i.encode_images(px, sample=False)  # noqa: E731

    def build(caching, condlabel=True):
        return build_dataset([concept], "64", 2, latent_caching=caching, cache_dir=tmp_path / "cache", vae_id=sd15i.vae_id,
                             encode_fn=encode, conditioning_fn=sd15i.encode_conditioning, condlabel=condlabel)

    def colour(rgb):
        return (torch.tensor(rgb, dtype=torch.float32) / 127.5 - 1).view(1, 3, 1, 1).expand(1, 3, 64, 64)

    def unet_inputs(batch, **options):
        seen, handle = _unet_inputs(sd15i)
        try:
            with torch.no_grad():
                _step(sd15i, unmasked_probability=0.0, custom_conditioning_image=True, **options).loss(batch)
        finally:
            handle.remove()
        return seen[0]

    left = torch.zeros(1, 1, 64, 64)
    left[..., :32] = 1.0
    green = sd15i.encode_images(colour((30, 200, 30)), sample=False)[0]  # "a"'s condlabel image, nothing masked
    blue_masked = sd15i.encode_conditioning(colour((30, 30, 200)), left)[0]
    assert not torch.allclose(green, sd15i.encode_conditioning(colour((200, 30, 30)), torch.zeros(1, 1, 64, 64))[0], atol=1e-3)
    plain = build(False, condlabel=False)
    assert sum(len(c.items) for c in plain.concepts) == 2  # a -condlabel image is never a training image
    assert plain.epoch_batches(0)[0].custom_conditioning is None
    for caching in (False, True):
        batch = build(caching).epoch_batches(0)[0]
        a = batch.image_paths.index(str((folder / "a.png").resolve()))
        assert batch.custom_conditioning.tolist() == [i == a for i in range(2)]
        got = unet_inputs(batch, masked_training=True)
        assert torch.allclose(got[a, 5:], green, atol=1e-4), caching
        assert torch.allclose(got[1 - a, 5:], blue_masked, atol=1e-4), caching
        off = unet_inputs(batch, masked_training=False)  # no masked training: the whole image, yet "a" keeps its condlabel image
        assert torch.allclose(off[a, 5:], green, atol=1e-4)
        assert torch.allclose(off[1 - a, 5:], sd15i.blank_latents(8, 8)[0])

    # the cache: "b"'s masked image is shared, "a" is keyed by its condlabel file, not by having none
    (tmp_path / "cache").rename(tmp_path / "old-cache")
    without = build(True, condlabel=False).cache_report
    assert (without.conditioning_total, without.conditioning_encoded) == (1, 1)
    report = build(True).cache_report
    assert (report.conditioning_total, report.conditioning_hits, report.conditioning_encoded) == (2, 1, 1)


# ------------------------------------------------------------------ sampling


@pytest.mark.parametrize("sampler", [NoiseScheduler.DDIM, NoiseScheduler.EULER_A])
def test_sampling_is_text_to_image_of_the_asked_size(sd15i, sampler):
    inputs = sd15i.sampling_inputs(64, 40)
    assert inputs["image"].size == (40, 64) and set(inputs["mask_image"].getdata()) == {255}
    a = sd15i.sample("a cat", height=64, width=40, steps=2, seed=3, sampler=sampler)
    b = sd15i.sample("a cat", height=64, width=40, steps=2, seed=3, sampler=sampler)
    assert a.size == (40, 64) and a.tobytes() == b.tobytes()
    assert type(sd15i.pipeline(sampler)).__name__ == "StableDiffusionInpaintPipeline"


def test_sd2_inpainting_samples(inpaint_paths):
    model = StableDiffusion20Inpainting.load(str(inpaint_paths[ModelType.STABLE_DIFFUSION_20_INPAINTING].diffusers_dir), offline=True)
    assert model.sample("a cat", height=48, width=64, steps=2, seed=1).size == (64, 48)


def test_samples_inpaint_the_given_image_inside_the_mask(sd15i, tmp_path):
    """`sample_inpainting`: the base image and the mask reach the inpainting pipeline (resized to
    the sample's size); without them it is text-to-image from a blank image."""
    from PIL import Image

    Image.new("RGB", (96, 96), (220, 20, 20)).save(tmp_path / "base.png")
    mask = Image.new("L", (96, 96), 0)
    mask.paste(255, (0, 0, 48, 96))
    mask.save(tmp_path / "mask.png")
    blank = sd15i.sample("a red circle", height=64, width=64, steps=2, seed=1)
    painted = sd15i.sample("a red circle", height=64, width=64, steps=2, seed=1,
                           image=str(tmp_path / "base.png"), mask=str(tmp_path / "mask.png"))
    assert painted.size == blank.size == (64, 64)
    assert painted.tobytes() != blank.tobytes()
    with pytest.raises(ValueError, match="both an image and a mask"):
        sd15i.sample("a red circle", height=64, width=64, steps=1, image=str(tmp_path / "base.png"))
    with pytest.raises(ValueError, match="cannot be read"):
        sd15i.sample("x", height=64, width=64, steps=1, image=str(tmp_path / "nothing.png"), mask=str(tmp_path / "mask.png"))


def test_a_samples_mask_reads_transparent_as_black_as_training_does(tmp_path):
    """`mask_image_path` painted white on a transparent layer repaints only the painted part, as
    the same file trains (data/images.load_mask); a mask without alpha reads as its luminance."""
    from ot_gradio.data.images import load_mask
    from ot_gradio.models.common import inpainting_images

    Image.new("RGB", (32, 32), (220, 20, 20)).save(tmp_path / "base.png")
    clear = Image.new("RGBA", (32, 32), (255, 255, 255, 0))
    clear.paste((255, 255, 255, 255), (0, 0, 16, 32))
    clear.save(tmp_path / "clear.png")
    Image.new("L", (32, 32), 77).save(tmp_path / "grey.png")
    for mask in (str(tmp_path / "clear.png"), clear):
        got = inpainting_images(32, 32, str(tmp_path / "base.png"), mask)["mask_image"]
        assert got.mode == "L" and got.getpixel((0, 0)) == 255 and got.getpixel((31, 0)) == 0
        assert got.tobytes() == load_mask(tmp_path / "clear.png").tobytes()
    assert set(inpainting_images(16, 16, str(tmp_path / "base.png"), str(tmp_path / "grey.png"))["mask_image"].getdata()) == {77}
    # a phone's photo, stored sideways with its EXIF orientation: read upright, as training reads it
    photo = Image.new("RGB", (40, 20), (0, 0, 255))
    photo.paste((255, 0, 0), (0, 0, 20, 20))  # red left half as stored
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to view
    photo.save(tmp_path / "phone.jpg", exif=exif, quality=95)
    upright = inpainting_images(40, 20, str(tmp_path / "phone.jpg"), str(tmp_path / "grey.png"))["image"]
    assert upright.size == (20, 40) and upright.getpixel((10, 5))[0] > 200  # the red half is on top once upright
    assert upright.getpixel((10, 35))[2] > 200


def test_inpainting_samples_are_checked_before_the_run(tmp_path):
    from ot_gradio.config.doctor import errors
    from ot_gradio.config.validation import validate

    (tmp_path / "base.png").write_bytes(b"")
    sample = {"prompt": "x", "sample_inpainting": True, "base_image_path": str(tmp_path / "base.png"),
              "mask_image_path": str(tmp_path / "missing.png")}
    inpainting = errors(validate({"model_type": "STABLE_DIFFUSION_15_INPAINTING", "samples": [sample]}))
    assert [p for p in inpainting if p.startswith("samples[0].")] == [
        f"samples[0].mask_image_path: file '{tmp_path / 'missing.png'}' does not exist."]
    plain = validate({"model_type": "STABLE_DIFFUSION_15", "samples": [sample]})  # ignored there, as in OneTrainer (said)
    assert not any(p.startswith("samples[0].") for p in errors(plain))
