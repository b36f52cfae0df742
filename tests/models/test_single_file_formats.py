"""A fine-tune's one-file formats are offered only where the family writes one: the families that
save a diffusers folder alone (HiDream, Sana, LTX-2) refuse them before the run, instead of
training for hours and failing at the save."""

from __future__ import annotations

import pytest

from ot_gradio.config.doctor import errors
from ot_gradio.config.enums import ModelFormat, ModelType, TrainingMethod
from ot_gradio.config.families import family_info
from ot_gradio.config.schema import TrainConfig
from ot_gradio.models.flow_family import FlowFamily
from ot_gradio.models.registry import get_family, supported_model_types


def test_the_single_file_flag_is_what_each_family_writes():
    for model_type in supported_model_types():
        writes = get_family(model_type).save_single_file is not FlowFamily.save_single_file
        assert family_info(model_type).single_file == writes, model_type


@pytest.mark.parametrize("model_type", [ModelType.HI_DREAM_FULL, ModelType.SANA, ModelType.LTX_2])
@pytest.mark.parametrize("fmt", [ModelFormat.SAFETENSORS, ModelFormat.ORIGINAL_SINGLE_FILE])
def test_a_family_saved_as_a_folder_refuses_one_file_before_the_run(model_type, fmt):
    config = TrainConfig(model_type=model_type, training_method=TrainingMethod.FINE_TUNE, output_model_format=fmt)
    assert any(e.startswith(f"output_model_format: {model_type.value} is saved as a diffusers folder here; {fmt.value}")
               for e in errors(config)), errors(config)
    config.output_model_format = ModelFormat.DIFFUSERS
    assert not [e for e in errors(config) if e.startswith("output_model_format")]
