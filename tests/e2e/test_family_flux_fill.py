"""Flux.1 Fill dev on the tiny model: the conditioning is the one diffusers' FluxFillPipeline
builds; a LoRA (masked training, cached masked-image latents), a fine-tune and an embedding run
through the worker; the LoRA loads into FluxFillPipeline and changes how it fills an image's
mask, the fine-tune is a diffusers folder the pipeline loads and the transformer file
round-trips; samples fill a given image and mask; a Fill run that would never see a mask is
refused before it starts."""

import json
import logging
import shutil

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from tests.e2e.runs import run_until_done

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_fill(tmp_path_factory):
    from ot_gradio.models.tiny.flux_fill import save_tiny_flux_fill

    return save_tiny_flux_fill(tmp_path_factory.mktemp("tiny-flux-fill"))


@pytest.fixture(scope="module")
def model(tiny_fill):
    from ot_gradio.models.registry import get_family

    return get_family("FLUX_FILL_DEV_1").load(str(tiny_fill.diffusers_dir))


@pytest.fixture(scope="module")
def masked_shapes(shapes, tmp_path_factory):
    """Four square demo shapes; three with a mask over their left half, one without a mask."""
    folder = tmp_path_factory.mktemp("fill-shapes")
    images = [p for p in sorted(shapes.glob("*.png")) if Image.open(p).size == (64, 64)][:4]
    for i, image in enumerate(images):
        shutil.copy(image, folder / image.name)
        shutil.copy(image.with_suffix(".txt"), folder / image.with_suffix(".txt").name)
        if i < 3:
            mask = Image.new("L", (64, 64), 0)
            mask.paste(255, (0, 0, 32, 64))
            mask.save(folder / f"{image.stem}-masklabel.png")
    return folder


def _half_mask(width=64, height=64):
    mask = Image.new("L", (width, height), 0)
    mask.paste(255, (0, 0, width // 2, height))
    return mask


def test_training_inputs_are_the_pipelines(model):
    """Noisy latents + masked-image latents + folded mask, packed 2x2, equal the hidden states
    FluxFillPipeline gives its transformer for the same latents and mask (384 values a token)."""
    from types import SimpleNamespace

    from ot_gradio.models.flux import pack_latents

    g = torch.Generator().manual_seed(0)
    pixels = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    mask = torch.zeros(2, 1, 64, 64)
    mask[0, :, :, :32] = 1  # left half to fill
    mask[1, :, 16:48, 8:40] = 1
    noisy = torch.randn(2, 16, 8, 8, generator=g)
    batch = SimpleNamespace(latent_mask=torch.nn.functional.interpolate(mask, (8, 8), mode="area"), mask=mask, pixels=pixels,
                            conditioning_latents=None)
    ours = pack_latents(torch.cat([noisy, model.fill_inputs(noisy, batch)], dim=1))
    assert ours.shape == (2, 16, 384)

    pipe = model.pipeline()
    masked = model.encode_conditioning(pixels, mask)  # shifted and scaled; the pipeline shifts and scales again
    raw = masked / model.vae.config.scaling_factor + model.vae.config.shift_factor
    packed_mask, packed_masked = pipe.prepare_mask_latents(mask, raw, 2, 16, 1, 64, 64, torch.float32, "cpu", None)
    theirs = torch.cat([pack_latents(noisy), packed_masked, packed_mask], dim=-1)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)

    whole = SimpleNamespace(latent_mask=torch.ones(2, 1, 8, 8), mask=None, pixels=pixels, conditioning_latents=None)
    blank = model.fill_inputs(noisy, whole)  # a white mask: the whole (blank) image is filled
    assert torch.equal(blank[:, 16:], torch.ones(2, 64, 8, 8))
    torch.testing.assert_close(blank[:, :16], model.encode_conditioning(torch.zeros(2, 3, 64, 64), None))

    # custom_conditioning_image: sample 0's -condlabel image (not masked) replaces its masked image, even with a white mask
    condlabel = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    custom = SimpleNamespace(latent_mask=batch.latent_mask, mask=mask, pixels=pixels, conditioning_latents=None,
                             custom_conditioning=torch.tensor([True, False]), condlabel_pixels=condlabel)
    got = model.fill_inputs(noisy, custom)
    torch.testing.assert_close(got[:1, :16], model.encode_conditioning(condlabel[:1], torch.zeros(1, 1, 64, 64)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1:], model.fill_inputs(noisy, batch)[1:], atol=1e-5, rtol=1e-5)
    whole.custom_conditioning, whole.condlabel_pixels = torch.tensor([True, False]), condlabel
    got = model.fill_inputs(noisy, whole)
    torch.testing.assert_close(got[:1, :16], model.encode_conditioning(condlabel[:1], torch.zeros(1, 1, 64, 64)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1:], blank[1:])


def test_samples_fill_the_given_image_and_mask(model, tmp_path):
    red = Image.new("RGB", (64, 64), (220, 20, 20))
    red.save(tmp_path / "base.png")
    _half_mask().save(tmp_path / "mask.png")
    blank = model.sample("a red circle", height=64, width=64, steps=2, cfg_scale=30, seed=1)
    filled = model.sample("a red circle", height=64, width=64, steps=2, cfg_scale=30, seed=1,
                          image=str(tmp_path / "base.png"), mask=str(tmp_path / "mask.png"))
    assert filled.size == blank.size == (64, 64)
    assert abs(torch.tensor(list(filled.getdata())).float() - torch.tensor(list(blank.getdata())).float()).max() > 0
    with pytest.raises(ValueError, match="both an image and a mask"):
        model.sample("a red circle", height=64, width=64, steps=1, image=red)


def test_the_transformer_file_round_trips(model, tiny_fill, tmp_path):
    """ORIGINAL_TRANSFORMER: the BFL-layout file (384 input channels) loads back tensor by tensor."""
    from ot_gradio.models.flux_fill import FluxFillDev1

    path = model.save_single_file(tmp_path / "flux1-fill.safetensors", None)
    assert load_file(str(path))["img_in.weight"].shape[1] == 384
    again = FluxFillDev1.load(str(path), config_dir=str(tiny_fill.diffusers_dir))
    ours, theirs = model.transformer.state_dict(), again.transformer.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_a_plain_flux_model_is_refused_as_fill(tmp_path):
    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.flux_fill import FluxFillDev1
    from ot_gradio.models.tiny.flux import save_tiny_flux

    plain = save_tiny_flux(tmp_path / "flux")
    with pytest.raises(ModelLoadError, match="not a Flux.1 Fill model.*64 input channels.*384"):
        FluxFillDev1.load(str(plain.diffusers_dir))


def _fill_config(tiny_fill, folder, tmp_path, **overrides):
    from ot_gradio.config.io import config_to_dict
    from ot_gradio.config.presets import apply_preset, load_preset
    from ot_gradio.config.schema import TrainConfig

    config = apply_preset(config_to_dict(TrainConfig()), load_preset("flux-fill-dev-1-lora"))  # our Fill preset
    assert config["model_type"] == "FLUX_FILL_DEV_1" and config["masked_training"]
    config.update(
        base_model_name=str(tiny_fill.diffusers_dir), concepts=[{"name": "fill", "path": str(folder)}],
        output_model_destination=str(tmp_path / "out" / "lora.safetensors"), workspace_dir=str(tmp_path / "ws"),
        cache_dir=str(tmp_path / "cache"), train_device="cpu", epochs=2, resolution="64", learning_rate_warmup_steps=0,
        learning_rate=1e-2, masked_training=True, unmasked_probability=0.0, latent_caching=True,
        sample_after=1, sample_after_unit="EPOCH",
        samples=[{"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2, "cfg_scale": 30}],
    )
    config.update(overrides)
    return config


def _fill(pipe, base, mask):
    return pipe("a red circle", image=base, mask_image=mask, height=64, width=64, num_inference_steps=2, guidance_scale=30,
                max_sequence_length=77, output_type="np", generator=torch.Generator().manual_seed(0)).images[0]


def test_lora_trains_with_masks_and_loads_into_the_fill_pipeline(tiny_fill, masked_shapes, tmp_path):
    from diffusers import FluxFillPipeline

    from ot_gradio.config.doctor import errors
    from ot_gradio.config.io import load_config

    config = _fill_config(tiny_fill, masked_shapes, tmp_path)
    Image.new("RGB", (64, 64), (220, 20, 20)).save(tmp_path / "base.png")
    _half_mask().save(tmp_path / "mask.png")
    config["samples"].append({"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2, "cfg_scale": 30,
                              "sample_inpainting": True, "base_image_path": str(tmp_path / "base.png"),
                              "mask_image_path": str(tmp_path / "mask.png")})
    assert errors(load_config(config).config) == []
    run, events = run_until_done(config, tmp_path)
    drawn = [e for e in events if e["type"] == "sample"]
    assert {e["index"] for e in drawn} == {0, 1}  # mid-run samples of the Fill model, one of them inpainting the red image
    last = {e["index"]: e["path"] for e in drawn}
    assert Image.open(last[0]).tobytes() != Image.open(last[1]).tobytes()
    # the masked images' latents were cached beside the images' own (4 images, 3 with a mask)
    assert len(list((tmp_path / "cache" / "latents").rglob("*.safetensors"))) == 4 + 3

    lora = tmp_path / "out" / "lora.safetensors"
    assert all(k.startswith("transformer.") for k in load_file(str(lora)))
    pipe = FluxFillPipeline.from_pretrained(str(tiny_fill.diffusers_dir), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    base = Image.open(next(p for p in sorted(masked_shapes.glob("*.png")) if "masklabel" not in p.name)).convert("RGB")
    before = _fill(pipe, base, _half_mask())
    messages = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("diffusers").addHandler(handler)
    try:
        pipe.load_lora_weights(str(lora))
    finally:
        logging.getLogger("diffusers").removeHandler(handler)
    assert not [m for m in messages if "unexpected key" in m.lower() or "not loaded" in m.lower()], messages
    after = _fill(pipe, base, _half_mask())
    assert abs(after - before).max() > 1e-3


def test_fine_tune_saves_a_diffusers_folder_the_fill_pipeline_loads(tiny_fill, masked_shapes, tmp_path):
    from diffusers import FluxFillPipeline

    config = _fill_config(
        tiny_fill, masked_shapes, tmp_path, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
        output_model_destination=str(tmp_path / "out" / "fill-ft"), latent_caching=False, epochs=1, learning_rate=1e-3,
        optimizer={"optimizer": "ADAMW"}, sample_after_unit="NEVER", samples=[],
        transformer={"train": True, "weight_dtype": "FLOAT_32"}, text_encoder_2={"train": False, "weight_dtype": "FLOAT_32"},
    )
    run_until_done(config, tmp_path)
    out = tmp_path / "out" / "fill-ft"
    assert json.loads((out / "model_index.json").read_text())["_class_name"] == "FluxFillPipeline"
    pipe = FluxFillPipeline.from_pretrained(str(out), local_files_only=True)
    base = FluxFillPipeline.from_pretrained(str(tiny_fill.diffusers_dir), local_files_only=True)
    assert pipe.transformer.config.in_channels == 384
    trained, original = pipe.transformer.state_dict(), base.transformer.state_dict()
    assert trained.keys() == original.keys()
    assert any(not torch.equal(trained[k], original[k]) for k in trained)


def test_embedding_trains_a_vector_per_text_encoder(tiny_fill, masked_shapes, model, tmp_path):
    """EMBEDDING on Fill: OneTrainer's keys (clip_l, t5), each moved from the initial text's rows."""
    out = tmp_path / "out" / "emb.safetensors"
    config = _fill_config(
        tiny_fill, masked_shapes, tmp_path, training_method="EMBEDDING", output_model_format="SAFETENSORS",
        output_model_destination=str(out), embedding={"token_count": 2, "initial_embedding_text": "circle"}, learning_rate=0.05,
        epochs=1, sample_after_unit="NEVER", samples=[], transformer={"train": False, "weight_dtype": "FLOAT_32"},
    )
    run_until_done(config, tmp_path)
    vectors = load_file(str(out))
    assert sorted(vectors) == ["clip_l", "t5", "t5xxl"] and torch.equal(vectors["t5xxl"], vectors["t5"])  # t5xxl: ComfyUI's key
    for key, part in (("clip_l", "text_encoder"), ("t5", "text_encoder_2")):
        tokenizer, encoder = model.tokenizers[part], getattr(model, part)
        ids = tokenizer("circle", add_special_tokens=False).input_ids
        star = tokenizer("*", add_special_tokens=False).input_ids[:1]
        initial = encoder.get_input_embeddings().weight[(list(ids)[:2] + star * 2)[:2]].detach()
        assert vectors[key].shape == initial.shape and not torch.allclose(vectors[key].float(), initial.float()), key


def test_fill_without_masks_is_refused_before_the_start(tiny_fill, masked_shapes, shapes, tmp_path):
    from ot_gradio.config.doctor import errors
    from ot_gradio.config.io import load_config

    no_masked_training = load_config(_fill_config(tiny_fill, masked_shapes, tmp_path, masked_training=False)).config
    assert [e for e in errors(no_masked_training) if e.startswith("masked_training: FLUX_FILL_DEV_1")]
    no_mask_files = load_config(_fill_config(tiny_fill, shapes, tmp_path)).config
    assert [e for e in errors(no_mask_files) if e.startswith("concepts: no image of the enabled concepts has a")]
    flux = load_config(_fill_config(tiny_fill, shapes, tmp_path, model_type="FLUX_DEV_1", masked_training=False)).config
    assert not [e for e in errors(flux) if "FLUX_FILL" in e]
