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
    assert len(found) == 1 and "save it as SAFETENSORS" in found[0]


@pytest.mark.parametrize(
    "overrides",
    [
        {"output_model_format": "SAFETENSORS"},  # PEFT keys: diffusers applies it as trained
        {"lora_decompose_output_axis": False},  # input axis: what A1111 / ComfyUI read
        {"lora_decompose": False},
        {"training_method": "FINE_TUNE", "output_model_format": "SAFETENSORS"},
    ],
)
def test_other_combinations_pass(overrides):
    assert not [e for e in errors(_config(**overrides)) if e.startswith("lora_decompose_output_axis:")]


def test_the_lora_method_refuses_it_before_touching_the_model():
    from ot_gradio.training.lora_method import LoraMethod

    with pytest.raises(ValueError, match=r"^lora_decompose_output_axis: .*SAFETENSORS"):
        LoraMethod().setup(None, _config(), torch.device("cpu"))
