"""SDXL and SDXL inpainting x FINE_TUNE and EMBEDDING run by the real worker on their tiny models; the outputs reloaded
with diffusers' own loaders: the fine-tune (single file and folder) holds exactly the trained
weights of the UNet and both text encoders, and the embedding file (`clip_l` + `clip_g`) loaded
with `load_textual_inversion` into both encoders draws the run's own sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from tests.e2e.runs import run_until_done

pytestmark = pytest.mark.slow


BASE, INPAINTING = "STABLE_DIFFUSION_XL_10_BASE", "STABLE_DIFFUSION_XL_10_BASE_INPAINTING"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from ot_gradio.models.tiny.sdxl import save_tiny_sdxl, save_tiny_sdxl_inpainting

    built = {}

    def get(model_type):
        if model_type not in built:
            save = save_tiny_sdxl_inpainting if model_type == INPAINTING else save_tiny_sdxl
            built[model_type] = save(tmp_path_factory.mktemp("tiny-sdxl-methods"))
        return built[model_type]

    return get


def _pipeline_class(model_type):
    import diffusers

    return diffusers.StableDiffusionXLInpaintPipeline if model_type == INPAINTING else diffusers.StableDiffusionXLPipeline


def _config(tiny, shapes, tmp_path, model_type=BASE, **overrides):
    config = {
        "model_type": model_type,
        "base_model_name": str(tiny.diffusers_dir),
        "train_device": "cpu", "train_dtype": "FLOAT_32",
        "workspace_dir": str(tmp_path / "ws"), "cache_dir": str(tmp_path / "cache"),
        "concepts": [{"name": "shapes", "path": str(shapes)}],
        "resolution": "64", "batch_size": 2, "epochs": 1, "learning_rate_warmup_steps": 0,
        "unet": {"gradient_checkpointing": False},
        "samples": [], "sample_image_format": "PNG", "sample_after": 0, "sample_after_unit": "NEVER",
        "backup_after": 0, "backup_after_unit": "NEVER", "tensorboard": False,
    }
    config.update(overrides)
    return config


def _ddim(pipe):
    from diffusers import DDIMScheduler

    pipe.scheduler = DDIMScheduler.from_config(dict(pipe.scheduler.config), clip_sample=False)  # our samples' DDIM
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(pipe, prompt, seed=3):
    import diffusers

    g = torch.Generator("cpu").manual_seed(seed)
    # text-to-image with an inpainting model: a blank image under a full mask, as our sampler does
    inpaint = isinstance(pipe, diffusers.StableDiffusionXLInpaintPipeline)
    extra = {"image": Image.new("RGB", (64, 64)), "mask_image": Image.new("L", (64, 64), 255), "strength": 1.0} if inpaint else {}
    with torch.no_grad():
        out = pipe(prompt, height=64, width=64, num_inference_steps=2, guidance_scale=7.0, generator=g, output_type="pil", **extra)
    return np.asarray(out.images[0]).astype(int)


def _assert_equal_weights(module, trained, part):
    weights = {k[len(part) + 1:]: v for k, v in trained.items() if k.startswith(part + ".")}
    state = module.state_dict()
    assert weights and set(weights) <= set(state), f"{part}: {sorted(set(weights) - set(state))[:3]}"
    different = [k for k, v in weights.items() if not torch.equal(state[k].float(), v.float())]
    assert not different, f"{part}: {len(different)} weights differ from the trained ones, e.g. {different[:3]}"


@pytest.mark.parametrize(("model_type", "fmt"), [(BASE, "ORIGINAL_SINGLE_FILE"), (BASE, "DIFFUSERS"), (INPAINTING, "DIFFUSERS")])
def test_sdxl_finetune_reloads_with_the_trained_weights(tiny_models, shapes, tmp_path, model_type, fmt):
    tiny_sdxl = tiny_models(model_type)
    StableDiffusionXLPipeline = _pipeline_class(model_type)  # noqa: N806
    config = _config(tiny_sdxl, shapes, tmp_path, model_type, training_method="FINE_TUNE", output_model_format=fmt,
                     output_model_destination=str(tmp_path / "out" / "model.safetensors"), learning_rate=1e-3,
                     text_encoder={"train": True}, text_encoder_2={"train": True})
    run, events = run_until_done(config, tmp_path)
    backups = sorted(p for p in run.backup.iterdir() if (p / "COMPLETE").exists())
    trained = load_file(str(backups[-1] / "trainable.safetensors"))  # written right before the save
    saved = [e["path"] for e in events if e["type"] == "saved"]
    if fmt == "DIFFUSERS":
        assert saved == [str(tmp_path / "out" / "model")]
        pipe = StableDiffusionXLPipeline.from_pretrained(saved[0], local_files_only=True)
    else:
        assert saved == [str(tmp_path / "out" / "model.safetensors")]
        pipe = StableDiffusionXLPipeline.from_single_file(saved[0], config=str(tiny_sdxl.diffusers_dir), local_files_only=True)
    for part in ("unet", "text_encoder", "text_encoder_2"):
        _assert_equal_weights(getattr(pipe, part), trained, part)
    base = _ddim(StableDiffusionXLPipeline.from_pretrained(str(tiny_sdxl.diffusers_dir), local_files_only=True))
    assert np.abs(_image(_ddim(pipe), "a red circle") - _image(base, "a red circle")).max() > 0


@pytest.mark.parametrize("model_type", [BASE, INPAINTING])
def test_sdxl_embedding_loads_into_both_encoders_and_draws_our_sample(tiny_models, shapes, tmp_path, model_type):
    tiny_sdxl = tiny_models(model_type)
    StableDiffusionXLPipeline = _pipeline_class(model_type)  # noqa: N806
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a photo of <embedding>\n")
    out = tmp_path / "out" / "emb.safetensors"
    config = _config(
        tiny_sdxl, shapes, tmp_path, model_type, training_method="EMBEDDING", output_model_format="SAFETENSORS",
        output_model_destination=str(out), embedding={"token_count": 2, "initial_embedding_text": "circle"}, learning_rate=0.05,
        concepts=[{"name": "shapes", "path": str(shapes), "text": {"prompt_source": "concept", "prompt_path": str(prompts)}}],
        samples=[{"prompt": "a photo of <embedding>", "height": 64, "width": 64, "diffusion_steps": 2, "seed": 3}],
    )
    run, events = run_until_done(config, tmp_path)
    vectors = load_file(str(out))
    assert sorted(vectors) == ["clip_g", "clip_l"] and vectors["clip_l"].shape[0] == vectors["clip_g"].shape[0] == 2

    pipe = _ddim(StableDiffusionXLPipeline.from_pretrained(str(tiny_sdxl.diffusers_dir), local_files_only=True))
    ids = pipe.tokenizer("circle", add_special_tokens=False).input_ids[:2]
    assert not torch.allclose(vectors["clip_l"], pipe.text_encoder.get_input_embeddings().weight[ids].detach())
    plain = _image(pipe, "a photo of")
    pipe.load_textual_inversion(vectors["clip_l"], token=["<x0>", "<x1>"], text_encoder=pipe.text_encoder, tokenizer=pipe.tokenizer)
    pipe.load_textual_inversion(vectors["clip_g"], token=["<x0>", "<x1>"], text_encoder=pipe.text_encoder_2, tokenizer=pipe.tokenizer_2)
    theirs = _image(pipe, "a photo of <x0><x1>")
    sample = [e for e in events if e["type"] == "sample"][-1]["path"]
    ours = np.asarray(Image.open(run.samples / sample.split("/")[-1]).convert("RGB")).astype(int)
    assert np.abs(theirs - ours).max() <= 1, "diffusers with our file draws another image than our sample"
    assert np.abs(theirs - plain).max() > 0
