from __future__ import annotations

import pytest

from ot_gradio.config.enums import ModelType
from ot_gradio.config.families import FAMILIES
from ot_gradio.models.registry import UnsupportedModelTypeError, get_family, register_family, supported_model_types


def test_sd15_is_registered():
    from ot_gradio.models.sd15 import StableDiffusion15

    assert get_family(ModelType.STABLE_DIFFUSION_15) is StableDiffusion15
    assert get_family("STABLE_DIFFUSION_15") is StableDiffusion15
    assert ModelType.STABLE_DIFFUSION_15 in supported_model_types()


@pytest.mark.parametrize("model_type", ["NOT_A_MODEL", "HUNYUAN_VIDEO"])
def test_unsupported_type_names_the_supported_ones(model_type):
    with pytest.raises(UnsupportedModelTypeError, match="STABLE_DIFFUSION_15") as info:
        get_family(model_type)
    assert str(model_type) in str(info.value)


def test_a_type_cannot_be_registered_twice():
    with pytest.raises(ValueError, match="already"):
        register_family(ModelType.STABLE_DIFFUSION_15)(type("Other", (), {}))


@pytest.mark.parametrize("model_type", [t for t, info in FAMILIES.items() if info.implemented])
def test_torch_free_table_agrees_with_the_family(model_type):
    """The page and the dataset report read the torch-free table; the trainer reads the class."""
    assert getattr(get_family(model_type), "bucket_step", None) == FAMILIES[model_type].bucket_step
