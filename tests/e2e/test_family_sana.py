"""Sana end to end on the tiny model: a LoRA from our own preset (only the
base model, the dataset, the output and the run's size changed) that SanaPipeline reloads with
`load_lora_weights` and that changes its output."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from ot_gradio.config.io import config_to_dict, load_config
from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import falls, imported, local_pipeline, losses_with_fixed_noise, one_image, run_until_done, tiny_fixture, train_from_cli
from tests.models.family_checks import pipeline_images

pytestmark = pytest.mark.slow
PROMPT = "a red circle"


tiny_sana = tiny_fixture("sana", "tiny_sana")


_images = pipeline_images(prompt=PROMPT)


def test_lora_from_our_preset_reloads_in_the_sana_pipeline(tiny_sana, shapes, tmp_path):
    """Two images, batch 1, one epoch: two optimizer steps, with a sample at the end through our
    sample path (CFG and the negative prompt)."""
    from diffusers import SanaPipeline
    from safetensors import safe_open

    data = tmp_path / "two"
    data.mkdir()
    for stem in ("01-red-circle", "02-blue-square"):
        for suffix in (".png", ".txt"):
            shutil.copy(shapes / f"{stem}{suffix}", data)
    config = config_to_dict(load_config(PRESETS_DIR / "sana-lora.json").config)
    assert (config["model_type"], config["output_model_format"], config["text_encoder_sequence_length"]) == (
        "SANA", "DIFFUSERS_LORA", 300)
    config.update(
        base_model_name=str(tiny_sana.diffusers_dir), concepts=[{"name": "shapes", "path": str(data)}],
        output_model_destination=str(tmp_path / "out" / "lora.safetensors"), workspace_dir=str(tmp_path / "ws"),
        cache_dir=str(tmp_path / "cache"), train_device="cpu", train_dtype="FLOAT_32", resolution="64", batch_size=1,
        epochs=1, learning_rate=5e-2, lora_alpha=16.0, samples=[{"prompt": PROMPT, "negative_prompt": "blue", "height": 64, "width": 64,
                                                "diffusion_steps": 2}],
        sample_after=1, sample_after_unit="EPOCH",
    )
    _, events = run_until_done(config, tmp_path)
    assert len([e for e in events if e["type"] == "metrics" and "loss" in e]) >= 1
    assert [e for e in events if e["type"] == "sample"]
    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        keys = list(f.keys())
    assert keys and all(k.startswith("transformer.transformer_blocks.") for k in keys)
    pipe = local_pipeline(tiny_sana.diffusers_dir, SanaPipeline)
    before = _images(pipe)
    pipe.load_lora_weights(str(out))
    assert np.abs(_images(pipe) - before).max() > 1e-3


def test_finetune_loss_falls_with_fixed_noise_and_timesteps_and_saves_a_folder(tiny_sana, shapes, tmp_path):
    """FINE_TUNE, in-process (no worker): the flow-matching objective through Sana's predict learns
    (one image, fixed noise and t), and the saved diffusers folder loads with the trained transformer."""
    config = imported(PRESETS_DIR / "sana-lora.json", tiny_sana.diffusers_dir, one_image(shapes, tmp_path), tmp_path, "tuned",
                      train_dtype="FLOAT_32", resolution="64", batch_size=1, epochs=15, learning_rate=4e-2,
                      training_method="FINE_TUNE", output_model_format="DIFFUSERS", samples=[],
                      layer_filter_preset="full")  # the LoRA preset's layers would pick the weights a fine-tune trains
    losses = losses_with_fixed_noise(config, tmp_path)
    assert len(losses) == 15 and falls(losses, 0.7), losses
    from ot_gradio.models.sana import Sana

    base, tuned = Sana.load(str(tiny_sana.diffusers_dir)), Sana.load(str(tmp_path / "out" / "tuned"))
    a, b = base.transformer.state_dict(), tuned.transformer.state_dict()
    assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])]


def test_embedding_trains_gemma_vectors_under_onetrainers_key(tiny_sana, shapes, tmp_path):
    """EMBEDDING: two new tokens in Gemma's vocabulary train; the file holds OneTrainer's "gemma"
    key; a sample with the embedding in its prompt runs."""
    from safetensors.torch import load_file

    from ot_gradio.models.sana import Sana

    data = tmp_path / "two"
    data.mkdir()
    for stem in ("01-red-circle", "02-blue-square"):
        shutil.copy(shapes / f"{stem}.png", data)
        (data / f"{stem}.txt").write_text("a photo of <embedding>, " + (shapes / f"{stem}.txt").read_text())
    config = config_to_dict(load_config(PRESETS_DIR / "sana-lora.json").config)
    config.update(
        base_model_name=str(tiny_sana.diffusers_dir), concepts=[{"name": "shapes", "path": str(data)}],
        output_model_destination=str(tmp_path / "out" / "emb.safetensors"), workspace_dir=str(tmp_path / "ws"),
        cache_dir=str(tmp_path / "cache"), train_device="cpu", train_dtype="FLOAT_32", resolution="64", batch_size=1,
        epochs=1, learning_rate=0.05, training_method="EMBEDDING", output_model_format="SAFETENSORS",
        embedding={"token_count": 2, "initial_embedding_text": "circle"},
        samples=[{"prompt": "a photo of <embedding>", "height": 64, "width": 64, "diffusion_steps": 2}],
        sample_after=1, sample_after_unit="EPOCH",
    )
    _, events = run_until_done(config, tmp_path)
    vectors = load_file(str(tmp_path / "out" / "emb.safetensors"))
    assert sorted(vectors) == ["gemma"] and vectors["gemma"].shape == (2, 32)
    model = Sana.load(str(tiny_sana.diffusers_dir))
    ids = model.tokenizer("circle", add_special_tokens=False).input_ids[:2]
    assert not torch.allclose(vectors["gemma"], model.text_encoder.get_input_embeddings().weight[ids].detach())
    assert [e for e in events if e["type"] == "sample"]


def test_lora_from_a_onetrainer_format_config_through_the_command_line(tiny_sana, shapes, tmp_path):
    """OneTrainer ships no Sana preset: a sparse config in its layout (no config_version, as its
    presets and saved configs are) trains a LoRA through `python -m ot_gradio train` that changes
    SanaPipeline's image."""
    from diffusers import SanaPipeline

    out = tmp_path / "out" / "lora.safetensors"
    onetrainer = {
        "base_model_name": str(tiny_sana.diffusers_dir), "model_type": "SANA", "training_method": "LORA",
        "output_model_format": "DIFFUSERS_LORA", "output_model_destination": str(out), "resolution": "64", "batch_size": 2,
        "epochs": 1, "learning_rate": 5e-2, "lora_rank": 4, "lora_alpha": 4.0, "train_dtype": "FLOAT_32",
        "train_device": "cpu", "workspace_dir": str(tmp_path / "workspace"), "cache_dir": str(tmp_path / "cache"),
        "transformer": {"train": True, "weight_dtype": "FLOAT_32"}, "text_encoder": {"train": False, "weight_dtype": "FLOAT_32"},
        "concepts": [{"name": "shapes", "path": str(shapes)}], "samples": [],
    }
    train_from_cli(onetrainer, tmp_path, "sana-onetrainer.json")
    pipe = local_pipeline(tiny_sana.diffusers_dir, SanaPipeline)
    before = _images(pipe)
    pipe.load_lora_weights(str(out))
    assert np.abs(_images(pipe) - before).max() > 1e-3
