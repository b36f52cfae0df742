"""The latent cache and the VAE's type: a float16 VAE's latents are not a float32 VAE's (the key
says which), and NaN or inf latents (SDXL's own VAE in float16) are never stored nor trained on."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.schema import TrainConfig
from ot_gradio.data import DataError, LatentCache, build_dataset
from ot_gradio.data.transform import CropBox
from ot_gradio.models.registry import get_family
from ot_gradio.training.vae_advice import nonfinite_latents_hint

SD15, SDXL = "STABLE_DIFFUSION_15", "STABLE_DIFFUSION_XL_10_BASE"


def _model(model_type: str, vae_dtype: torch.dtype):
    return get_family(model_type).load("tiny:sd15" if model_type == SD15 else "tiny:sdxl", dtypes={"vae": vae_dtype})


def _cache(tmp_path, model, folder, make_concept, **kwargs):
    return build_dataset([make_concept(folder)], "64", 1, latent_caching=True, cache_dir=tmp_path / "cache", vae_id=model.vae_id,
                         encode_fn=lambda pixels: model.encode_images(pixels, sample=False), **kwargs)


def _stored(tmp_path) -> list:
    return sorted((tmp_path / "cache").rglob("*.safetensors"))


def test_the_vae_type_is_in_the_key_and_the_same_settings_hit_the_cache(tmp_path, write_image, make_concept):
    folder = tmp_path / "concept"
    write_image(folder / "a.png", 64, 64)
    half, half_again = _model(SD15, torch.float16), _model(SD15, torch.float16)
    assert half.vae_id == half_again.vae_id  # a resumed run with the same settings: the same key
    full = _model(SD15, torch.float16)
    full.vae.to(torch.float32)  # the same values in float32: a float16 file loaded at FLOAT_32
    assert full.vae_id != half.vae_id
    args = ("/data/a.png", 100, 1, (64, 64), CropBox(0, 0, 64, 64), False, (64, 64))
    assert LatentCache(tmp_path, half.vae_id).key(*args) == LatentCache(tmp_path, half_again.vae_id).key(*args)
    assert LatentCache(tmp_path, half.vae_id).key(*args) != LatentCache(tmp_path, full.vae_id).key(*args)

    assert _cache(tmp_path, half, folder, make_concept).cache_report.encoded == 1
    assert _cache(tmp_path, half_again, folder, make_concept).cache_report.hits == 1
    switched = _cache(tmp_path, full, folder, make_concept).cache_report  # 'Clear cache before training' off
    assert (switched.hits, switched.encoded) == (0, 1)


def test_nan_latents_stop_caching_naming_the_image_and_the_vae_type(tmp_path, write_image, make_concept):
    image = write_image(tmp_path / "concept" / "sunset.png", 64, 64)
    model = _model(SDXL, torch.float16)
    with torch.no_grad():
        model.vae.encoder.conv_in.weight[0, 0, 0, 0] = float("nan")  # as SDXL's own VAE overflows in float16
    config = TrainConfig.model_validate({"model_type": SDXL, "vae": {"weight_dtype": "FLOAT_16"}})
    with pytest.raises(DataError) as err:
        _cache(tmp_path, model, image.parent, make_concept, nonfinite_hint=nonfinite_latents_hint(model, config))
    message = str(err.value)
    assert str(image) in message and "NaN or inf latents" in message and "nothing was cached for it" in message
    assert "the VAE encodes in float16 (vae.weight_dtype FLOAT_16)" in message
    assert "madebyollin/sdxl-vae-fp16-fix" in message and "FLOAT_32" in message
    assert _stored(tmp_path) == []


class NanForSome:
    """A stand-in VAE whose latents are NaN for the images whose names are given (by their pixels' seed colour)."""

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        latents = torch.nn.functional.avg_pool2d(pixels, 8).repeat(1, 2, 1, 1)[:, :4]
        latents[pixels[:, 0].mean((1, 2)) > 0.5] = float("nan")  # the red images
        return latents


def test_only_the_bad_images_are_named_and_nothing_of_their_chunk_is_stored(tmp_path, write_image, make_concept):
    folder = tmp_path / "concept"
    red = write_image(folder / "red.png", 64, 64, colour=(250, 20, 20))
    write_image(folder / "blue.png", 64, 64, colour=(20, 20, 250))
    with pytest.raises(DataError) as err:
        build_dataset([make_concept(folder)], "64", 1, latent_caching=True, cache_dir=tmp_path / "cache", vae_id="v", encode_fn=NanForSome())
    message = str(err.value)
    assert str(red) in message and "blue.png" not in message and "FLOAT_32" in message  # the data layer's own hint
    assert _stored(tmp_path) == []


def test_a_cached_nan_latent_is_refused_when_read(tmp_path):
    cache = LatentCache(tmp_path, "v", nonfinite_hint="the VAE encodes in float16")
    key = "ab" * 32
    cache.put(key, torch.tensor([[1.0, float("nan")]]))
    assert cache.has(key)  # the header is fine: refused when the batch reads it
    with pytest.raises(DataError, match=r"encoding /data/a\.png made NaN or inf latents.*Clear cache before training.*float16"):
        cache.load(key, "/data/a.png")
    cache.put(key, {"latent": torch.ones(2), "image_embeds": torch.tensor([float("inf")])})
    with pytest.raises(DataError, match="NaN or inf"):
        cache.load_all(key, "/data/a.png")
