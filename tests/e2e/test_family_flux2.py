"""Flux.2 end to end through the worker on the tiny dev and Klein models: OneTrainer's
flux2-LoRA-16GB.json imported unchanged but for the base model, the dataset, the output and a
CPU-sized run (64 px, 2 epochs, compile off), its INT_W8A8 transformer multiplying in 8 bits; the
DIFFUSERS_LORA reloaded with `load_lora_weights` (dev: the image changes; Klein: it loads with
no unexpected key), a COMFY_LORA placed by ComfyUI's rules, and a FINE_TUNE diffusers folder
that reloads with the trained weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.io import load_config
from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, local_pipeline, lora_load_problems, run_until_done, tiny_fixture
from tests.models.family_checks import pipeline_images

pytestmark = pytest.mark.slow
PRESET = Path(__file__).resolve().parents[1] / "config" / "data" / "onetrainer-presets-2026" / "flux2-LoRA-16GB.json"
PRESET_OURS = PRESETS_DIR / "flux2-lora.json"
PROMPT = "a red circle"
# `compile` is on in the preset; torch.compile on the CPU compiles the tiny transformer for
# minutes, so the CPU-sized run turns it off (as the Z-Image e2e does)
CPU_SIZE = {"resolution": "64", "epochs": 2, "compile": False}


tiny_dev = tiny_fixture("flux2-dev", "tiny_dev")


tiny_klein = tiny_fixture("flux2-klein", "tiny_klein")


_image = pipeline_images(prompt=PROMPT, guidance_scale=3.0)


def test_onetrainer_flux2_preset_trains_a_dev_lora_that_changes_the_pipeline(tiny_dev, shapes, tmp_path):
    from diffusers import Flux2Pipeline

    from ot_gradio.models.flux2_keys import comfy_lora_targets

    result = load_config(PRESET)
    assert not [w for w in result.warnings if "weight_dtype" in w], result.warnings
    config = imported(PRESET, tiny_dev.diffusers_dir, shapes, tmp_path, "lora.safetensors", **CPU_SIZE)
    assert (config["training_method"], config["transformer"]["weight_dtype"], config["text_encoder"]["weight_dtype"]) == (
        "LORA", "INT_W8A8", "FLOAT_8")
    _, events = run_until_done(config, tmp_path)
    losses = [e["loss"] for e in events if e["type"] == "metrics" and "loss" in e]
    assert losses and all(np.isfinite(losses))
    path = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
        assert any(f.get_tensor(k).abs().max() > 0 for k in keys if ".lora_B." in k)
    # the preset's layer filter "transformer_block": both kinds of block, nothing else
    assert keys and all(k.startswith(("transformer.transformer_blocks.", "transformer.single_transformer_blocks.")) for k in keys)
    pipe = local_pipeline(tiny_dev.diffusers_dir)
    assert isinstance(pipe, Flux2Pipeline)
    before = _image(pipe)
    assert lora_load_problems(pipe, path) == []
    assert np.abs(_image(pipe) - before).max() > 1e-6  # the same pipeline draws the same image bit for bit
    assert comfy_lora_targets(pipe.transformer, keys)


def test_klein_lora_from_the_same_preset_trains_and_reloads(tiny_klein, shapes, tmp_path):
    from diffusers import Flux2KleinPipeline

    config = imported(PRESET, tiny_klein.diffusers_dir, shapes, tmp_path, "lora.safetensors", **CPU_SIZE, learning_rate=1e-2)
    run_until_done(config, tmp_path)
    pipe = local_pipeline(tiny_klein.diffusers_dir)
    assert isinstance(pipe, Flux2KleinPipeline)
    before = _image(pipe)
    assert lora_load_problems(pipe, tmp_path / "out" / "lora.safetensors") == []
    assert np.abs(_image(pipe) - before).max() > 1e-6


def test_comfy_lora_from_our_preset_with_a_sample(tiny_dev, shapes, tmp_path):
    """presets/flux2-lora.json writing COMFY_LORA (`lora_transformer_*` keys): every key is placed
    on a weight of the BFL checkpoint as ComfyUI's Flux key map places it; a sample is drawn."""
    from diffusers import Flux2Transformer2DModel

    from ot_gradio.models.flux2_keys import comfy_lora_targets

    config = imported(PRESET_OURS, tiny_dev.diffusers_dir, shapes, tmp_path, "lora.safetensors", **CPU_SIZE, output_model_format="COMFY_LORA",
                     samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}], sample_after=1,
                     sample_after_unit="EPOCH")
    _, events = run_until_done(config, tmp_path)
    assert [e for e in events if e["type"] == "sample"]
    with safe_open(str(tmp_path / "out" / "lora.safetensors"), "pt") as f:
        keys = list(f.keys())
    # attention by its diffusers name (rows of the fused qkv), the rest by its original name
    assert keys and all(k.startswith(("lora_transformer_", "lora_unet_")) for k in keys)
    transformer = Flux2Transformer2DModel.from_pretrained(str(tiny_dev.diffusers_dir), subfolder="transformer")
    targets = comfy_lora_targets(transformer, keys)
    assert {p.key for p in targets.values()} >= {"double_blocks.0.img_attn.qkv.weight", "single_blocks.0.linear1.weight"}


def test_finetune_writes_a_diffusers_folder_that_reloads(tiny_klein, shapes, tmp_path):
    from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel

    config = imported(PRESET, tiny_klein.diffusers_dir, shapes, tmp_path, "model", **CPU_SIZE, training_method="FINE_TUNE",
                     output_model_format="DIFFUSERS", learning_rate=1e-3, output_dtype="FLOAT_32", train_dtype="FLOAT_32",
                     optimizer={"optimizer": "ADAMW"}, transformer={"train": True, "weight_dtype": "FLOAT_32"})
    run_until_done(config, tmp_path)
    pipe = Flux2KleinPipeline.from_pretrained(str(tmp_path / "out" / "model"), local_files_only=True)
    tuned = pipe.transformer.state_dict()
    base = Flux2Transformer2DModel.from_pretrained(str(tiny_klein.diffusers_dir), subfolder="transformer").state_dict()
    assert tuned.keys() == base.keys()
    assert [k for k in tuned if not torch.equal(tuned[k], base[k])]
    assert type(pipe.text_encoder).__name__ == "Qwen3ForCausalLM"



def test_finetune_writes_the_original_transformer_file_that_reloads(tiny_dev, shapes, tmp_path):
    """ORIGINAL_TRANSFORMER: the dev transformer alone in the BFL layout (ComfyUI's diffusion-model
    loader), read back by the family's loader through diffusers' from_single_file."""
    from diffusers import Flux2Transformer2DModel
    from safetensors import safe_open

    from ot_gradio.models.flux2 import Flux2

    config = imported(PRESET, tiny_dev.diffusers_dir, shapes, tmp_path, "model.safetensors", **CPU_SIZE, training_method="FINE_TUNE",
                     output_model_format="ORIGINAL_TRANSFORMER", learning_rate=1e-3, output_dtype="FLOAT_32",
                     train_dtype="FLOAT_32", optimizer={"optimizer": "ADAMW"}, transformer={"train": True, "weight_dtype": "FLOAT_32"})
    run_until_done(config, tmp_path)
    out = tmp_path / "out" / "model.safetensors"
    with safe_open(str(out), "pt") as f:
        assert "double_blocks.0.img_attn.qkv.weight" in f.keys() and f.metadata()["ot_gradio.model_type"] == "FLUX_2"
    tuned = Flux2.load(str(out), config_dir=str(tiny_dev.diffusers_dir)).transformer.state_dict()
    base = Flux2Transformer2DModel.from_pretrained(str(tiny_dev.diffusers_dir), subfolder="transformer").state_dict()
    assert tuned.keys() == base.keys()
    assert [k for k in tuned if not torch.equal(tuned[k], base[k])]
