"""A LoRA part that no reader loads from the chosen file layout is refused before the run, naming
the part, the format and why; the same part in a layout a reader loads passes."""

import pytest

from ot_gradio.config.doctor import errors
from ot_gradio.config.io import load_config

CASES = [  # model type, trained text encoder part, refused formats, accepted formats
    ("FLUX_DEV_1", "text_encoder_2", ("SAFETENSORS", "DIFFUSERS_LORA"), ("KOHYA_LORA", "COMFY_LORA")),
    ("CHROMA_1", "text_encoder", ("SAFETENSORS", "DIFFUSERS_LORA"), ("KOHYA_LORA", "COMFY_LORA")),
    ("PIXART_SIGMA", "text_encoder", ("SAFETENSORS",), ("KOHYA_LORA",)),
    ("QWEN", "text_encoder", ("DIFFUSERS_LORA",), ("COMFY_LORA",)),
    ("QWEN_IMAGE_EDIT", "text_encoder", ("DIFFUSERS_LORA",), ("COMFY_LORA",)),
    ("Z_IMAGE", "text_encoder", ("SAFETENSORS",), ("KOHYA_LORA",)),
    ("STABLE_DIFFUSION_35", "text_encoder_3", ("SAFETENSORS",), ("KOHYA_LORA",)),
    ("SANA", "text_encoder", ("SAFETENSORS", "KOHYA_LORA"), ()),
]


def _errors(model_type, part, fmt, train=True):
    config = load_config({"config_version": 2, "model_type": model_type, "training_method": "LORA", "output_model_format": fmt,
                          part: {"train": train}}).config  # ours: OneTrainer's Z-Image never trains its text encoder
    return [e for e in errors(config) if e.startswith(f"{part}.train: ")]


@pytest.mark.parametrize(("model_type", "part", "refused", "accepted"), CASES)
def test_a_part_no_reader_loads_is_refused_by_format(model_type, part, refused, accepted):
    for fmt in refused:
        (problem,) = _errors(model_type, part, fmt)  # one message, from one rule
        assert fmt in problem
        assert not _errors(model_type, part, fmt, train=False)
    for fmt in accepted:
        assert not _errors(model_type, part, fmt)


@pytest.mark.parametrize(("model_type", "preset", "warned"), [
    ("CHROMA_1", "full", True), ("CHROMA_1", "attn-only", False), ("FLUX_2", "attn-only", True), ("FLUX_DEV_1", "full", False),
    ("WAN_2_1", "attn-mlp", True), ("ANIMA", "attn-mlp", True), ("HUNYUAN_VIDEO", "blocks", True),  # ComfyUI: original names only
    ("STABLE_DIFFUSION_15", "attn-only", True), ("STABLE_DIFFUSION_XL_10_BASE", "full", True),  # attention: old processor names only
])
def test_a_diffusers_file_comfyui_loads_in_part_is_warned_about(model_type, preset, warned):
    """Chroma's guidance layer, Flux.2's own layers, every layer of Wan, Anima and HunyuanVideo, SD's attention: diffusers loads them from a diffusers-layout
    file, ComfyUI skips them (scripts/check_comfyui_lora.py); the KOHYA/COMFY layout is not warned."""
    from ot_gradio.config.doctor import check

    sd = model_type.startswith("STABLE_DIFFUSION")  # SAFETENSORS writes kohya keys there
    for fmt, expect in (("DIFFUSERS_LORA", warned), ("SAFETENSORS", warned and not sd), ("COMFY_LORA", False)):
        config = load_config({"model_type": model_type, "training_method": "LORA", "output_model_format": fmt,
                              "layer_filter_preset": preset}).config
        found = [w for w in check(config) if "ComfyUI skips" in w]
        assert len(found) == int(expect), (fmt, found)
        assert not expect or ((("SAFETENSORS or KOHYA_LORA" in found[0] and "A1111 and Forge load none" in found[0]) if sd
                               else "COMFY_LORA" in found[0]) and fmt in found[0])
