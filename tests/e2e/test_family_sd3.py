"""Stable Diffusion 3 end to end through the worker on the tiny model: OneTrainer's sd-3.json
imported unchanged but for the base model, the dataset and the output, and a LoRA from our own
preset that StableDiffusion3Pipeline reloads with `load_lora_weights` and that changes its output."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import falls, imported, local_pipeline, losses_with_fixed_noise, one_image, run_until_done, tiny_fixture, train_from_cli
from tests.models.family_checks import pipeline_images

pytestmark = pytest.mark.slow
OT_PRESET = Path(__file__).resolve().parents[1] / "config" / "data" / "onetrainer-presets-2026" / "sd-3.json"
PROMPT = "a red circle"


tiny_sd3 = tiny_fixture("sd3", "tiny_sd3")


_images = pipeline_images(prompt=PROMPT, max_sequence_length=77)


def test_onetrainer_sd3_preset_fine_tunes_the_tiny_model(tiny_sd3, shapes, tmp_path):
    """sd-3.json as OneTrainer ships it (FINE_TUNE, 1024 px, LOGIT_NORMAL, CLIPs and T5 frozen in
    float16, a float16 ORIGINAL_SINGLE_FILE): one image and two epochs, so a CPU run at 1024 px
    stays short. The single file reloads through diffusers' from_single_file with the base
    folder as the config folder."""
    from diffusers import SD3Transformer2DModel

    from ot_gradio.models.sd3 import StableDiffusion3

    data = tmp_path / "one"
    data.mkdir()
    for suffix in (".png", ".txt"):
        shutil.copy(shapes / f"01-red-circle{suffix}", data)
    config = imported(OT_PRESET, tiny_sd3.diffusers_dir, data, tmp_path, "model.safetensors", epochs=2)
    assert (config["training_method"], config["resolution"], config["output_model_format"]) == ("FINE_TUNE", "1024", "ORIGINAL_SINGLE_FILE")
    run_until_done(config, tmp_path)
    out = tmp_path / "out" / "model.safetensors"
    base = SD3Transformer2DModel.from_pretrained(str(tiny_sd3.diffusers_dir), subfolder="transformer")
    tuned = StableDiffusion3.load(str(out), config_dir=str(tiny_sd3.diffusers_dir), offline=True).transformer
    with safe_open(str(out), "pt") as f:  # the preset's output_dtype
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}
    before = {k: v.to(torch.float16) for k, v in base.state_dict().items()}
    after = {k: v.to(torch.float16) for k, v in tuned.state_dict().items()}
    assert after.keys() == before.keys()
    assert [k for k in after if not torch.equal(after[k], before[k])]


def test_lora_from_our_preset_reloads_in_the_sd3_pipeline(tiny_sd3, shapes, tmp_path):
    config = imported(PRESETS_DIR / "sd3-lora.json", tiny_sd3.diffusers_dir, shapes, tmp_path, "lora.safetensors",
                     output_model_format="SAFETENSORS", resolution="64", epochs=2, learning_rate=1e-2, train_dtype="FLOAT_32")
    run_until_done(config, tmp_path)
    from diffusers import StableDiffusion3Pipeline

    pipe = local_pipeline(tiny_sd3.diffusers_dir, StableDiffusion3Pipeline)
    before = _images(pipe)
    pipe.load_lora_weights(str(tmp_path / "out" / "lora.safetensors"))
    assert np.abs(_images(pipe) - before).max() > 1e-3


def test_embedding_trains_a_vector_per_text_encoder(tiny_sd3, shapes, tmp_path):
    """EMBEDDING: the tokens go into CLIP-L, CLIP-G and T5 and the file holds OneTrainer's keys."""
    from safetensors.torch import load_file

    from ot_gradio.models.sd3 import StableDiffusion3

    config = imported(PRESETS_DIR / "sd3-lora.json", tiny_sd3.diffusers_dir, shapes, tmp_path, "emb.safetensors", training_method="EMBEDDING",
                     output_model_format="SAFETENSORS", resolution="64", epochs=1, learning_rate=0.05, train_dtype="FLOAT_32",
                     embedding={"token_count": 2, "initial_embedding_text": "circle"},
                     samples=[{"prompt": "a photo of <embedding>", "height": 64, "width": 64, "diffusion_steps": 2}],
                     sample_after=1, sample_after_unit="EPOCH")
    _, events = run_until_done(config, tmp_path)
    vectors = load_file(str(tmp_path / "out" / "emb.safetensors"))
    assert sorted(vectors) == ["clip_g", "clip_l", "t5", "t5xxl"] and {v.shape[0] for v in vectors.values()} == {2}  # t5xxl: ComfyUI's key
    model = StableDiffusion3.load(str(tiny_sd3.diffusers_dir))
    for key, part in (("clip_l", "text_encoder"), ("clip_g", "text_encoder_2"), ("t5", "text_encoder_3")):
        ids = model.tokenizers[part]("circle", add_special_tokens=False).input_ids[:2]
        assert not torch.allclose(vectors[key], getattr(model, part).get_input_embeddings().weight[ids].detach()), key
    assert [e for e in events if e["type"] == "sample"]


def test_lora_loss_falls_with_fixed_noise_and_timesteps(tiny_sd3, shapes, tmp_path):
    """The flow-matching objective through SD 3's predict learns: one image, fixed noise and t (LoRA on
    every layer at scale 1: the tiny transformer's attention and MLP alone move its normalised output
    too little to fit a fixed target in 25 steps)."""
    config = imported(PRESETS_DIR / "sd3-lora.json", tiny_sd3.diffusers_dir, one_image(shapes, tmp_path), tmp_path,
                      "lora.safetensors", resolution="64", epochs=25, batch_size=1, learning_rate=4e-2, lora_alpha=16.0,
                      layer_filter_preset="full", train_dtype="FLOAT_32", samples=[])
    losses = losses_with_fixed_noise(config, tmp_path)
    assert len(losses) == 25 and falls(losses, 0.8), losses


def test_lora_from_onetrainers_sd3_preset_through_the_command_line(tiny_sd3, shapes, tmp_path):
    """OneTrainer's sd-3.json in its own layout, switched to a LoRA (training_method, output) and
    sized for a CPU (64 px, one epoch), trained by `python -m ot_gradio train`: the LoRA changes
    StableDiffusion3Pipeline's image."""
    import json

    from diffusers import StableDiffusion3Pipeline

    out = tmp_path / "out" / "lora.safetensors"
    data = json.loads(OT_PRESET.read_text())
    assert "config_version" not in data  # OneTrainer's layout
    data.update(base_model_name=str(tiny_sd3.diffusers_dir), concepts=[{"name": "shapes", "path": str(shapes)}],
                output_model_destination=str(out), training_method="LORA", output_model_format="SAFETENSORS", resolution="64",
                epochs=1, learning_rate=1e-2, learning_rate_warmup_steps=0, train_device="cpu", samples=[],
                workspace_dir=str(tmp_path / "workspace"), cache_dir=str(tmp_path / "cache"))
    train_from_cli(data, tmp_path, "sd-3-lora.json")
    pipe = local_pipeline(tiny_sd3.diffusers_dir, StableDiffusion3Pipeline)
    before = _images(pipe)
    pipe.load_lora_weights(str(out))
    assert np.abs(_images(pipe) - before).max() > 1e-3
