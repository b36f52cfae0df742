"""Output-axis DoRA has no KOHYA_LORA form the common loaders apply as trained: refused before
training (the doctor's errors, and the LORA method itself), naming the format to use."""

import pytest
import torch

from ot_gradio.config.doctor import errors
from ot_gradio.config.schema import TrainConfig


def _config(**overrides):
    base = {"training_method": "LORA", "lora_decompose": True, "lora_decompose_output_axis": True, "output_model_format": "KOHYA_LORA"}
    return TrainConfig(**{**base, **overrides})


def test_output_axis_dora_in_a_kohya_file_is_refused():
    found = [e for e in errors(_config()) if e.startswith("lora_decompose_output_axis:")]
    assert len(found) == 1 and "save it as DIFFUSERS_LORA" in found[0]


@pytest.mark.parametrize(
    "overrides",
    [
        {"output_model_format": "DIFFUSERS_LORA"},  # PEFT keys: diffusers applies it as trained
        {"output_model_format": "SAFETENSORS", "model_type": "FLUX_DEV_1"},  # SAFETENSORS: PEFT keys for Flux
        {"lora_decompose_output_axis": False},  # input axis: what A1111 / ComfyUI read
        {"lora_decompose": False},
        {"training_method": "FINE_TUNE", "output_model_format": "SAFETENSORS"},
    ],
)
def test_other_combinations_pass(overrides):
    assert not [e for e in errors(_config(**overrides)) if e.startswith("lora_decompose_output_axis:")]


def test_sd_safetensors_is_a_kohya_file_here():
    """SAFETENSORS on SD 1.x/2.x/SDXL writes kohya keys (what A1111 and Forge read): refused as KOHYA_LORA is."""
    found = [e for e in errors(_config(output_model_format="SAFETENSORS")) if e.startswith("lora_decompose_output_axis:")]
    assert len(found) == 1 and "saved as SAFETENSORS (kohya keys)" in found[0]


def test_the_lora_method_refuses_it_before_touching_the_model():
    from ot_gradio.training.lora_method import LoraMethod

    with pytest.raises(ValueError, match=r"^lora_decompose_output_axis: .*DIFFUSERS_LORA"):
        LoraMethod().setup(None, _config(), torch.device("cpu"))
