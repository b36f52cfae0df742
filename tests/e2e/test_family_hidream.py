"""HiDream end to end on the tiny model: a LoRA from our preset (FLOAT_8 transformer, T5 and
Llama; the Llama from text_encoder_4's model, a repo of its own as the hub has it) trained in a
worker process on the shapes, that HiDreamImagePipeline reloads with `load_lora_weights`
(nothing ignored) and that changes its image; the run draws a sample after its epoch."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, run_until_done, tiny_fixture

pytestmark = pytest.mark.slow
PROMPT = "a red circle"

tiny_hidream = tiny_fixture("hidream", "tiny_hidream")


def _latents(pipe) -> np.ndarray:
    """The pipeline's latents for a fixed seed (the tiny VAE's decoder flattens differences), at 32 px:
    the pipeline rescales every size to its `default_sample_size` area (1024 px square), too slow here."""
    pipe.default_sample_size = 4
    return pipe(PROMPT, height=32, width=32, num_inference_steps=2, guidance_scale=5.0,
                generator=torch.Generator().manual_seed(0), output_type="latent").images.float().numpy()


def test_lora_from_our_preset_reloads_in_the_hidream_pipeline(tiny_hidream, shapes, tmp_path):
    llama = tmp_path / "llama"  # the Llama as its own repo: model and tokenizer files together
    for part in ("text_encoder_4", "tokenizer_4"):
        shutil.copytree(tiny_hidream.diffusers_dir / part, llama, dirs_exist_ok=True)
    config = imported(PRESETS_DIR / "hidream-lora.json", tiny_hidream.diffusers_dir, shapes, tmp_path, "lora.safetensors",
                      resolution="64", epochs=1, batch_size=2, learning_rate=5e-2, lora_rank=4, lora_alpha=4.0,
                      sample_after=1, sample_after_unit="EPOCH", samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}])
    assert (config["model_type"], config["output_model_format"], config["text_encoder_4"]["model_name"]) == (
        "HI_DREAM_FULL", "DIFFUSERS_LORA", "meta-llama/Llama-3.1-8B-Instruct")
    config["text_encoder_4"]["model_name"] = str(llama)
    _, events = run_until_done(config, tmp_path)
    losses = [e["loss"] for e in events if e["type"] == "metrics" and "loss" in e]
    assert losses and all(np.isfinite(losses))
    assert [e for e in events if e["type"] == "sample"]

    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        keys = list(f.keys())
        assert all(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)  # every layer trained
    assert any(k.startswith("transformer.double_stream_blocks.0.block.attn1.") for k in keys)
    assert any(".experts." in k for k in keys)  # the routed experts, trained through the training routing
    assert all(k.startswith("transformer.") for k in keys), keys
    pipe = local_pipeline(tiny_hidream.diffusers_dir)
    before = _latents(pipe)
    assert lora_load_problems(pipe, out) == []
    assert np.abs(_latents(pipe) - before).max() > 1e-3


def test_fine_tune_saves_a_folder_the_hidream_pipeline_loads(tiny_hidream, shapes, tmp_path):
    """OneTrainer's HiDream FINE_TUNE: the transformer trained, the whole model saved as a
    diffusers folder that HiDreamImagePipeline.from_pretrained loads, its transformer changed."""
    from diffusers import HiDreamImageTransformer2DModel

    llama = tmp_path / "llama"
    for part in ("text_encoder_4", "tokenizer_4"):
        shutil.copytree(tiny_hidream.diffusers_dir / part, llama, dirs_exist_ok=True)
    config = imported(PRESETS_DIR / "hidream-lora.json", tiny_hidream.diffusers_dir, shapes, tmp_path, "model", resolution="64",
                      epochs=1, batch_size=2, learning_rate=1e-3, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
                      output_dtype="FLOAT_32", train_dtype="FLOAT_32", optimizer={"optimizer": "ADAMW"}, samples=[],
                      transformer={"train": True, "weight_dtype": "FLOAT_32"})
    config["text_encoder_4"]["model_name"] = str(llama)
    run_until_done(config, tmp_path)
    out = tmp_path / "out" / "model"
    tuned = HiDreamImageTransformer2DModel.from_pretrained(str(out), subfolder="transformer").state_dict()
    base = HiDreamImageTransformer2DModel.from_pretrained(str(tiny_hidream.diffusers_dir), subfolder="transformer").state_dict()
    assert tuned.keys() == base.keys()
    assert [k for k in tuned if not torch.equal(tuned[k], base[k])]
    pipe = local_pipeline(out)
    assert _latents(pipe).shape[0] == 1


def test_embedding_trains_new_tokens_in_all_four_text_encoders(tiny_hidream, shapes, tmp_path):
    """OneTrainer's HiDream EMBEDDING: new tokens in CLIP-L, CLIP-G, T5 and the Llama train; the
    file holds OneTrainer's keys (clip_l, clip_g, t5, llama); a sample with the embedding runs."""
    from safetensors.torch import load_file

    llama = tmp_path / "llama"
    for part in ("text_encoder_4", "tokenizer_4"):
        shutil.copytree(tiny_hidream.diffusers_dir / part, llama, dirs_exist_ok=True)
    data = tmp_path / "two"
    data.mkdir()
    for stem in ("01-red-circle", "02-blue-square"):
        shutil.copy(shapes / f"{stem}.png", data)
        (data / f"{stem}.txt").write_text("a photo of <embedding>, " + (shapes / f"{stem}.txt").read_text())
    config = imported(PRESETS_DIR / "hidream-lora.json", tiny_hidream.diffusers_dir, data, tmp_path, "emb.safetensors", resolution="64",
                      epochs=1, batch_size=1, learning_rate=0.05, train_dtype="FLOAT_32", training_method="EMBEDDING",
                      output_model_format="SAFETENSORS", embedding={"token_count": 2, "initial_embedding_text": "circle"},
                      samples=[{"prompt": "a photo of <embedding>", "height": 64, "width": 64, "diffusion_steps": 2}],
                      sample_after=1, sample_after_unit="EPOCH")
    config["text_encoder_4"]["model_name"] = str(llama)
    _, events = run_until_done(config, tmp_path)
    vectors = load_file(str(tmp_path / "out" / "emb.safetensors"))
    assert sorted(vectors) == ["clip_g", "clip_l", "llama", "t5", "t5xxl"]  # t5xxl: a copy of t5 under ComfyUI's key
    assert all(v.shape[0] == 2 for v in vectors.values())
    from ot_gradio.models.hidream import HiDream

    model = HiDream.load(str(tiny_hidream.diffusers_dir), part_models={"text_encoder_4": str(llama)})
    ids = model.tokenizers["text_encoder_4"]("circle", add_special_tokens=False).input_ids[:2]
    start = model.text_encoder_4.get_input_embeddings().weight[ids].detach().float()
    assert start.shape == vectors["llama"].shape and not torch.allclose(vectors["llama"].float(), start)
    assert [e for e in events if e["type"] == "sample"]
