"""PixArt-Σ end to end: a LoRA trained by the command line from OneTrainer's preset reloads into diffusers' PixArtSigmaPipeline
through the transformer's PEFT adapter API (the pipeline has no load_lora_weights) and changes its
output; OneTrainer's PixArt-Σ preset imports unchanged and trains (FINE_TUNE and EMBEDDING are
in test_methods_matrix.py)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from tests.e2e.runs import run_until_done, train_from_cli

pytestmark = pytest.mark.slow
PRESET = Path(__file__).parents[2].parent / "shared" / "reference" / "onetrainer-presets" / "pixart-sigma-1.0.json"
LOCAL_PRESET = Path(__file__).parents[1] / "config" / "data" / "onetrainer-presets-2026" / "pixart-sigma-1.0.json"


@pytest.fixture(scope="module")
def tiny_sigma(tmp_path_factory):
    from ot_gradio.models.tiny.pixart_sigma import save_tiny_pixart_sigma

    return save_tiny_pixart_sigma(tmp_path_factory.mktemp("tiny-pixart-sigma"))


def _pipeline(tiny_sigma):
    from diffusers import PixArtSigmaPipeline

    pipe = PixArtSigmaPipeline.from_pretrained(str(tiny_sigma.diffusers_dir), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(pipe):
    g = torch.Generator().manual_seed(0)
    return pipe("a red circle", num_inference_steps=2, height=64, width=64, generator=g, output_type="np",
                use_resolution_binning=False, clean_caption=False, max_sequence_length=32).images[0]


def test_pixart_sigma_lora_loads_through_peft_and_changes_the_image(tiny_sigma, shapes, tmp_path):
    """OneTrainer's PixArt-Σ preset in its own layout, switched to a LoRA (method, format, learning
    rate) and pointed at the tiny model, trained by `python -m ot_gradio train`: the LoRA reloads
    through PEFT and changes PixArtSigmaPipeline's image."""
    from peft import LoraConfig, inject_adapter_in_model, set_peft_model_state_dict

    out = tmp_path / "out" / "lora.safetensors"
    onetrainer = json.loads(LOCAL_PRESET.read_text())
    concepts = tmp_path / "concepts.json"
    concepts.write_text(json.dumps([{"name": "shapes", "path": str(shapes)}]))
    onetrainer.update(
        base_model_name=str(tiny_sigma.diffusers_dir), training_method="LORA", output_model_format="SAFETENSORS",
        output_model_destination=str(out), concept_file_name=str(concepts), epochs=1, batch_size=2, resolution="64",
        learning_rate=1e-2, learning_rate_warmup_steps=0, lora_rank=4, lora_alpha=2.0, train_device="cpu",
        workspace_dir=str(tmp_path / "ws"), cache_dir=str(tmp_path / "cache"), samples=[], sample_after_unit="NEVER",
        tensorboard=False,
    )
    train_from_cli(onetrainer, tmp_path, "pixart-sigma-lora-onetrainer.json")
    tensors = load_file(str(out))
    with safe_open(str(out), "pt") as f:
        adapter = json.loads(f.metadata()["lora_adapter_metadata"])
    assert tensors and all(k.startswith("transformer.") for k in tensors)  # the transformer only (T5 frozen)

    pipe = _pipeline(tiny_sigma)
    before = _image(pipe)
    lora = LoraConfig(r=adapter["transformer.r"], lora_alpha=adapter["transformer.lora_alpha"],
                      target_modules=adapter["transformer.target_modules"])
    inject_adapter_in_model(lora, pipe.transformer)
    result = set_peft_model_state_dict(pipe.transformer, {k.removeprefix("transformer."): v for k, v in tensors.items()})
    assert not result.unexpected_keys
    assert not [k for k in result.missing_keys if "lora_" in k]
    assert abs(_image(pipe) - before).max() > 1e-3


def test_onetrainer_pixart_sigma_preset_imports_and_trains(tiny_sigma, shapes, tmp_path):
    """OneTrainer's preset as it ships (FINE_TUNE, ORIGINAL_TRANSFORMER, bf16 transformer), with the
    base model, dataset and output pointed here, and the run shrunk to CPU size (epochs, batch,
    resolution)."""
    from ot_gradio.config.io import load_config

    raw = json.loads(LOCAL_PRESET.read_text())
    if PRESET.is_file():  # the copy kept with the tests is OneTrainer's file, unchanged
        assert raw == json.loads(PRESET.read_text())
    raw.update(base_model_name=str(tiny_sigma.diffusers_dir), output_model_destination=str(tmp_path / "out" / "sigma"),
               epochs=1, batch_size=2, resolution="64")
    concepts = tmp_path / "concepts.json"
    concepts.write_text(json.dumps([{"name": "shapes", "path": str(shapes)}]))
    raw["concept_file_name"] = str(concepts)
    data = load_config(raw).config.model_dump(mode="json")
    assert data["model_type"] == "PIXART_SIGMA" and data["output_model_format"] == "ORIGINAL_TRANSFORMER"
    data.update(train_device="cpu", workspace_dir=str(tmp_path / "ws"), cache_dir=str(tmp_path / "cache"),
                text_encoder_sequence_length=32, samples=[], sample_after_unit="NEVER", tensorboard=False)
    run, events = run_until_done(data, tmp_path)
    saved = [e["path"] for e in events if e["type"] == "saved"]
    assert saved and saved[-1].endswith(".safetensors")
    keys = set(load_file(saved[-1]))
    assert "blocks.0.attn.qkv.weight" in keys and "final_layer.linear.weight" in keys  # PixArt's original layout
    assert not any(k.startswith(("text_encoder", "vae")) for k in keys)  # the transformer alone
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
