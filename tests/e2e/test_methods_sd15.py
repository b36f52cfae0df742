"""SD 1.5 x FINE_TUNE, EMBEDDING and LORA with an additional embedding, each run by the real
worker process for a few steps, the output reloaded with diffusers' own loaders."""

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from tests.e2e.runs import run_until_done

pytestmark = pytest.mark.slow


@pytest.fixture
def prompt_file(tmp_path):
    def make(text):
        path = tmp_path / "prompts.txt"
        path.write_text(text + "\n")
        return {"prompt_source": "concept", "prompt_path": str(path)}

    return make


def _pipe(folder):
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(folder), safety_checker=None)
    return _ddim(pipe)


def _ddim(pipe):
    from diffusers import DDIMScheduler

    # the sampler our samples use (models/sd15.py SAMPLERS[DDIM])
    pipe.scheduler = DDIMScheduler.from_config(dict(pipe.scheduler.config), clip_sample=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(pipe, prompt, seed=3):
    g = torch.Generator("cpu").manual_seed(seed)
    out = pipe(prompt, height=64, width=64, num_inference_steps=2, guidance_scale=7.0, generator=g, output_type="pil")
    return np.asarray(out.images[0]).astype(int)


def _last_sample(run, events):
    path = [e for e in events if e["type"] == "sample"][-1]["path"]
    return np.asarray(Image.open(run.samples / path.split("/")[-1])).astype(int)


def _final_backup(run):
    backups = sorted(p for p in run.backup.iterdir() if (p / "COMPLETE").exists())
    return load_file(str(backups[-1] / "trainable.safetensors"))


def _assert_equal_weights(module, trained, part):
    weights = {k[len(part) + 1 :]: v for k, v in trained.items() if k.startswith(part + ".")}
    state = module.state_dict()
    assert weights and set(weights) <= set(state)
    different = [k for k, v in weights.items() if not torch.equal(state[k].float(), v.float())]
    assert not different, f"{part}: {len(different)} weights differ from the trained ones, e.g. {different[:3]}"


@pytest.mark.parametrize("fmt", ["ORIGINAL_SINGLE_FILE", "DIFFUSERS"])
def test_finetune_output_reloads_with_the_trained_weights(lora_config, tiny_model, tmp_path, fmt):
    from diffusers import StableDiffusionPipeline

    config = lora_config(
        training_method="FINE_TUNE", output_model_format=fmt, output_model_destination=str(tmp_path / "out" / "model.safetensors"),
        epochs=1, learning_rate=1e-3, samples=[],
    )
    run, events = run_until_done(config, tmp_path)
    trained = _final_backup(run)  # written right before the save: the weights that were saved
    saved = [e["path"] for e in events if e["type"] == "saved"]
    if fmt == "DIFFUSERS":
        assert saved == [str(tmp_path / "out" / "model")]
        pipe = _pipe(tmp_path / "out" / "model")
    else:
        assert saved == [str(tmp_path / "out" / "model.safetensors")]
        pipe = _ddim(StableDiffusionPipeline.from_single_file(
            saved[0], config=str(tiny_model.diffusers_dir), local_files_only=True, safety_checker=None
        ))
    _assert_equal_weights(pipe.unet, trained, "unet")
    _assert_equal_weights(pipe.text_encoder, trained, "text_encoder")
    base = _pipe(tiny_model.diffusers_dir)
    assert np.abs(_image(pipe, "a red circle") - _image(base, "a red circle")).max() > 0


def test_embedding_loads_with_load_textual_inversion(lora_config, tiny_model, tmp_path, prompt_file):
    out = tmp_path / "out" / "emb.safetensors"
    config = lora_config(
        training_method="EMBEDDING", output_model_format="SAFETENSORS", output_model_destination=str(out),
        embedding={"token_count": 2, "initial_embedding_text": "circle"}, learning_rate=0.05, epochs=1,
        concepts=[{"path": lora_config()["concepts"][0]["path"], "text": prompt_file("a photo of <embedding>")}],
        samples=[{"prompt": "a photo of <embedding>", "height": 64, "width": 64, "diffusion_steps": 2, "seed": 3}],
        sample_image_format="PNG",
    )
    run, events = run_until_done(config, tmp_path)
    vectors = load_file(str(out))
    assert list(vectors) == ["emp_params"] and vectors["emp_params"].shape == (2, 32)

    pipe = _pipe(tiny_model.diffusers_dir)
    ids = pipe.tokenizer("circle", add_special_tokens=False).input_ids[:2]
    initial = pipe.text_encoder.get_input_embeddings().weight[ids].detach()
    assert not torch.allclose(vectors["emp_params"], initial)  # training moved the vectors

    plain = _image(pipe, "a photo of")
    pipe.load_textual_inversion(str(out), token="<x>")
    ours = _last_sample(run, events)
    theirs = _image(pipe, "a photo of <x>")
    assert np.abs(theirs - ours).max() <= 1, "diffusers with our file draws another image than our sample"
    assert np.abs(theirs - plain).max() > 0


def test_lora_with_a_bundled_additional_embedding(lora_config, tiny_model, tmp_path, prompt_file):
    out = tmp_path / "out" / "lora.safetensors"
    config = lora_config(
        additional_embeddings=[{"placeholder": "<trig>", "token_count": 2, "initial_embedding_text": "dog"}],
        embedding_learning_rate=0.05, epochs=1, output_model_destination=str(out),
        concepts=[{"path": lora_config()["concepts"][0]["path"], "text": prompt_file("a photo of <trig>")}],
        samples=[{"prompt": "a photo of <trig>", "height": 64, "width": 64, "diffusion_steps": 2, "seed": 3}],
        sample_image_format="PNG",
    )
    run, events = run_until_done(config, tmp_path)
    tensors = load_file(str(out))
    bundled = tensors.pop("bundle_emb.<trig>.string_to_param.*")
    # also its own A1111 file next to the LoRA (ComfyUI's LoRA loader skips bundle_emb.*), named in the log
    separate = tmp_path / "out" / "lora_embeddings" / "trig.safetensors"
    assert torch.equal(load_file(str(separate))["emp_params"], bundled)
    assert str(separate) in run.log.read_text()
    assert bundled.shape == (2, 32) and all(k.startswith(("lora_unet_", "lora_te_")) for k in tensors)

    pipe = _pipe(tiny_model.diffusers_dir)
    ids = pipe.tokenizer("dog", add_special_tokens=False).input_ids[:2]
    assert not torch.allclose(bundled, pipe.text_encoder.get_input_embeddings().weight[ids].detach())

    # diffusers' load_lora_weights refuses unknown keys, so the bundle goes in through load_textual_inversion
    pipe.load_lora_weights(tensors)
    pipe.load_textual_inversion(bundled, token="<t>")
    theirs = _image(pipe, "a photo of <t>")
    assert np.abs(theirs - _last_sample(run, events)).max() <= 1
