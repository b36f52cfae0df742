"""The memory planner on a model built on the meta device (training/memory_meta.py, what
bench/memory_presets.py runs at full size): OneTrainer's presets as shipped, on the tiny models
moved to meta. bitsandbytes' weights get their stored size, layer offloading is counted without
moving anything, language-model encoders (which cannot run on meta) still give the probe
its text embeddings, and the frozen parts a run keeps in RAM are not counted on the card."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.training.memory_meta import estimate_on_meta, offloaded_bytes_planned
from ot_gradio.training.offload import find_blocks

PRESETS = Path(__file__).resolve().parents[1] / "config/data/onetrainer-training-presets"
GiB = 1024**3


def _on_meta(model_type: str):
    from ot_gradio.models.registry import get_family

    name = {"FLUX_DEV_1": "flux", "QWEN": "qwen_image", "Z_IMAGE": "z_image", "CHROMA_1": "chroma", "LTX_2": "ltx2"}[model_type]
    module = __import__(f"ot_gradio.models.tiny.{name}", fromlist=["x"])
    components = getattr(module, f"tiny_{name}_components")()
    for value in components.values():
        if isinstance(value, torch.nn.Module):
            value.to("meta")
    return get_family(model_type)(components)


def _preset(relative: str):
    return load_config(PRESETS / relative).config


def test_the_flux_preset_nf4_parts_are_counted_as_stored():
    config = _preset("Flux Dev.1/#flux LoRA.json")
    model = _on_meta("FLUX_DEV_1")
    linear = sum(m.weight.numel() for m in model.transformer.modules() if type(m) is torch.nn.Linear)
    plan, on = estimate_on_meta(model, config, 16 * GiB)
    assert not plan.probe_error and plan.peak(on) is not None and plan.activations(on) > 0
    dtypes, size = plan.weights["transformer"]
    assert "uint8" in dtypes
    packed = sum(p.numel() for p in model.transformer.parameters() if p.dtype == torch.uint8)
    assert packed == pytest.approx(linear / 2, rel=0.01)  # 4 bits a weight
    absmax = sum(b.nbytes for name, b in model.transformer.named_buffers() if name.endswith("meta_absmax"))
    assert absmax == pytest.approx(linear / 64, rel=0.01) and size > packed + absmax  # a byte per 64 weights
    assert plan.gradients > 0 and plan.optimizer_state > plan.gradients  # AdamW: two states of the LoRA weights
    # latents and text cached: CLIP, the NF4 T5 and the VAE wait in RAM (training/placement.py)
    assert config.latent_caching and plan.parked == ["text_encoder", "text_encoder_2", "vae"]
    frozen = plan.weights["text_encoder"][1] + plan.weights["text_encoder_2"][1] + plan.weights["vae"][1]
    assert frozen > 0 and plan.weight_bytes == sum(b for _, b in plan.weights.values()) - frozen
    assert "text_encoder, text_encoder_2 and vae" in plan.breakdown(on) and "in RAM while the steps run" in plan.breakdown(on)


def test_layer_offloading_is_counted_without_moving():
    config = _preset("QwenImage/#qwen LoRA 16GB.json")
    assert config.transformer.offload_fraction == 0.5
    model = _on_meta("QWEN")
    plan, on = estimate_on_meta(model, config, 16 * GiB)
    assert not plan.probe_error and plan.peak(on) is not None
    blocks = find_blocks(model.transformer)
    last = blocks[len(blocks) - math.ceil(0.5 * len(blocks)):]
    frozen = sum(t.numel() * t.element_size() for b in last for t in [*b.parameters(), *b.buffers()] if not t.requires_grad)
    assert frozen > 0 and plan.offloaded == offloaded_bytes_planned(model, config) == frozen
    assert plan.parked == ["text_encoder", "vae"]  # cached text and latents: in RAM while the steps run
    assert plan.weight_bytes == sum(b for _, b in plan.weights.values()) - frozen - plan.parked_bytes
    assert all(p.device.type == "meta" for p in model.transformer.parameters())


@pytest.mark.parametrize("model_type, relative", [("Z_IMAGE", "Z-Image/#z-image LoRA 8GB.json"),
                                                   ("CHROMA_1", "Chroma/#chroma LoRA 8GB.json")])
def test_a_language_model_or_masked_t5_encoder_gives_the_probe_its_embeddings(model_type, relative):
    # Qwen3 cannot run on meta; Chroma reads T5 with its attention mask, which cannot be built there
    config = _preset(relative)
    model = _on_meta(model_type)
    plan, on = estimate_on_meta(model, config, 8 * GiB)
    assert not plan.probe_error and plan.activations(on) > 0
    assert "float8_e4m3fn" in plan.weights["text_encoder"][0]  # FLOAT_8 in both presets
    # the frozen FLOAT_8 text encoder and the VAE are not counted on the card (training/placement.py)
    frozen = plan.weights["text_encoder"][1] + plan.weights["vae"][1]
    assert plan.parked == ["text_encoder", "vae"]
    assert plan.weight_bytes == sum(b for _, b in plan.weights.values()) - plan.offloaded - frozen
    assert "forward" not in vars(model.text_encoder) and "planner_device" not in dict(model.text_encoder.named_parameters())


def test_ltx2s_connectors_run_beside_the_frozen_gemma_in_the_probe():
    """LTX-2's text connectors (not a part: run on Gemma's states, kept on the device) give the probe
    the transformer's text states; they stay on meta and are counted on the card."""
    config = load_config(Path(__file__).resolve().parents[2] / "presets/ltx2-lora.json").config
    model = _on_meta("LTX_2")
    plan, on = estimate_on_meta(model, config, 24 * GiB)
    assert not plan.probe_error and plan.activations(on) > 0
    assert "connectors" in plan.weights and "connectors" not in plan.parked
    assert all(p.device.type == "meta" for p in model.connectors.parameters())
    assert "forward" not in vars(model.connectors) and "to" not in vars(model.connectors)


def test_the_probe_runs_frozen_float16_norms_as_a_float16_step_does(monkeypatch, tmp_path):
    """Our SD 1.5 LoRA preset (FLOAT_16) on a CUDA card: the probe's meta step runs the frozen
    norms in float16 as the trainer's step does (norm_casts.py), so it counts float16 activations
    where autocast's float32 norms would keep float32 ones: fewer bytes than with them."""
    from ot_gradio.config.io import config_to_dict
    from ot_gradio.config.presets import apply_preset, load_preset
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components
    from ot_gradio.training import memory_probe

    data = apply_preset(config_to_dict(TrainConfig()), load_preset("sd15-lora"))
    data.update(train_device="cuda", resolution="64", batch_size=2, concepts=[], workspace_dir=str(tmp_path / "ws"))

    def activations() -> int:
        config = load_config({**data, "cache_dir": str(tmp_path / str(len(list(tmp_path.iterdir()))))}).config  # no probe reused
        components = tiny_sd15_components()
        for value in components.values():
            if isinstance(value, torch.nn.Module):
                value.to("meta")
        plan, on = estimate_on_meta(get_family("STABLE_DIFFUSION_15")(**components), config, 16 * GiB)
        assert not plan.probe_error
        return plan.activations(on)

    half = activations()
    monkeypatch.setattr(memory_probe, "affine_norms", lambda modules: [])  # autocast's float32 norms
    assert half < 0.9 * activations()


def test_an_estimate_downloads_nothing_a_run_would_start_from(monkeypatch):
    """A Base LoRA or embedding given as an address is not fetched for an estimate (the page
    estimates on every change): the config's rank and token count stand in."""
    monkeypatch.setenv("CIVITAI_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: a download would fail
    config = _preset("Flux Dev.1/#flux LoRA.json").model_copy(update={
        "lora_model_name": "https://civitai.com/models/77?modelVersionId=770",
        "additional_embeddings": [{"model_name": "https://huggingface.co/someone/ti/blob/main/style.safetensors", "placeholder": "<s>"}]})
    config = load_config(config.model_dump(mode="json")).config
    plan, on = estimate_on_meta(_on_meta("FLUX_DEV_1"), config, 16 * GiB)
    assert not plan.probe_error and plan.peak(on) is not None
