"""A misspelt `tiny:` base model is refused before the run, naming the known ones (it failed at load)."""

from __future__ import annotations

from ot_gradio.config.doctor import errors
from ot_gradio.config.schema import TrainConfig
from ot_gradio.config.tiny_names import tiny_model_names


def test_the_names_read_from_the_sources_are_the_registrys():
    from ot_gradio.models.tiny import all_tiny_models

    assert tiny_model_names() == tuple(sorted(all_tiny_models()))


def test_a_misspelt_tiny_model_is_refused_naming_the_known_ones():
    bad = TrainConfig.model_validate({"base_model_name": "tiny:sd51"})
    said = [e for e in errors(bad) if e.startswith("base_model_name: 'tiny:sd51' is not a tiny model; known: ")]
    assert said and "tiny:sd15" in said[0]
    assert not [e for e in errors(TrainConfig.model_validate({"base_model_name": "tiny:sd15"})) if "tiny model" in e]
