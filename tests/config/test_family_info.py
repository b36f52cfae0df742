"""The families' torch-free descriptions (config/family_info): one module per family module,
each model type described once, and each family's base-model sign found for its own names."""

from pathlib import Path
from types import SimpleNamespace

import pytest

import ot_gradio
from ot_gradio.config import family_info
from ot_gradio.config.base_model_match import _by_class, _by_name
from ot_gradio.config.enums import ModelType as M
from ot_gradio.config.families import FAMILIES, SIGNS, FamilyInfo

PACKAGE = Path(ot_gradio.__file__).parent


def test_each_description_sits_beside_a_family_module_of_its_name():
    described = {p.stem for p in (PACKAGE / "config" / "family_info").glob("*.py") if not p.stem.startswith("_")}
    assert described and described <= {p.stem for p in (PACKAGE / "models").glob("*.py")}


def test_a_model_type_described_twice_is_refused(monkeypatch):
    info = FamilyInfo(("unet", "vae"), "unet", ())
    twice = [SimpleNamespace(__name__="one", FAMILIES={M.SANA: info}), SimpleNamespace(__name__="two", FAMILIES={M.SANA: info})]
    monkeypatch.setattr(family_info, "_modules", lambda: iter(twice))
    with pytest.raises(ValueError, match="SANA is described in both one and two"):
        family_info.collect()


def test_families_come_in_model_type_order():
    assert list(FAMILIES) == [m for m in M if m in FAMILIES]


@pytest.mark.parametrize("sign", SIGNS, ids=lambda s: s.name)
def test_each_sign_is_found_by_its_own_words_and_pipelines(sign):
    # "flux2" is Flux.2 although it holds Flux.1's "flux"; "StableDiffusionXLPipeline" is SDXL
    for word in sign.name_words:
        assert _by_name(f"org/{word}-finetune") is sign, word
    for prefix in sign.class_prefixes:  # (Wan 2.1 I2V and Wan 2.2 I2V A14B share a pipeline: found as one sign of both)
        found = _by_class(f"{prefix}Pipeline" if not prefix.endswith("Pipeline") else prefix)
        assert found is sign or (sign.name in found.name and set(sign.model_types) < set(found.model_types)), prefix
    assert set(sign.model_types) <= set(FAMILIES)


def test_each_described_model_type_has_one_sign():
    signed = [m for sign in SIGNS for m in sign.model_types]
    assert sorted(signed) == sorted(set(signed)) and set(signed) == set(FAMILIES)
