"""Output format names as OneTrainer's configs write them map to the files the trainer writes."""

import pytest

from ot_gradio.config.enums import ModelFormat
from ot_gradio.training.finetune_method import check_finetune_format
from ot_gradio.training.lora_format import DIFFUSERS, KOHYA
from ot_gradio.training.lora_method import lora_file_format


@pytest.mark.parametrize(("fmt", "layout"), [("KOHYA_LORA", KOHYA), ("COMFY_LORA", KOHYA), ("SAFETENSORS", DIFFUSERS),
                                             ("DIFFUSERS_LORA", DIFFUSERS)])
def test_lora_formats(fmt, layout):
    assert lora_file_format(ModelFormat(fmt)) == layout


def test_lora_formats_not_written_are_refused_by_name():
    with pytest.raises(ValueError, match="output_model_format: .*ORIGINAL_LORA.* KOHYA_LORA or COMFY_LORA"):
        lora_file_format(ModelFormat.ORIGINAL_LORA)


def test_transformer_only_files_need_a_family_that_writes_them():
    from ot_gradio.models.pixart import PixArtAlpha
    from ot_gradio.models.sd15 import StableDiffusion15

    pixart, sd15 = object.__new__(PixArtAlpha), object.__new__(StableDiffusion15)
    for fmt in (ModelFormat.ORIGINAL_TRANSFORMER, ModelFormat.COMFY_TRANSFORMER):
        check_finetune_format(fmt, pixart)
        with pytest.raises(ValueError, match=f"output_model_format: {fmt.value} is the transformer alone"):
            check_finetune_format(fmt, sd15)
    with pytest.raises(ValueError, match="not a whole-model format"):
        check_finetune_format(ModelFormat.KOHYA_LORA, pixart)
