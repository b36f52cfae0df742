"""The page offers only what trains: the torch-free catalogue agrees with the trainer's own
registries, the Model type, Training method and Optimizer dropdowns list it and nothing else,
and a config (ours or OneTrainer's) naming something else fails to load naming the field."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ot_gradio.config.catalogue import IMPLEMENTED_OPTIMIZERS, offered_values, unavailable
from ot_gradio.config.enums import ModelType, Optimizer, TrainingMethod
from ot_gradio.config.families import IMPLEMENTED_METHODS, implemented_model_types
from ot_gradio.config.fields import iter_fields
from ot_gradio.config.io import ConfigError, load_config
from ot_gradio.config.schema import TrainConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_optimizer_list_is_the_registry():
    from ot_gradio.training.optimizers import OPTIMIZERS

    assert set(IMPLEMENTED_OPTIMIZERS) == set(OPTIMIZERS)
    assert len(IMPLEMENTED_OPTIMIZERS) == len(set(IMPLEMENTED_OPTIMIZERS))


def test_the_model_types_are_the_registered_families():
    from ot_gradio.models.registry import supported_model_types

    assert set(implemented_model_types()) == set(supported_model_types())


def test_the_training_methods_are_the_registered_methods():
    from ot_gradio.training import embedding_method, finetune_method, lora_method  # noqa: F401  (they register)
    from ot_gradio.training.methods import METHODS

    assert set(IMPLEMENTED_METHODS) == set(METHODS)


def test_the_catalogue_and_the_schema_fields_do_not_import_torch():
    code = ("import sys; import ot_gradio.config.catalogue, ot_gradio.config.io, ot_gradio.ui.form; "
            "heavy = [m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules]; assert not heavy, heavy")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_dropdowns_offer_only_what_trains():
    from ot_gradio.ui.form import make_component, schema_fields

    fields = {f.path: f for f in schema_fields()}
    assert fields["model_type"].choices == [m.value for m in ModelType if m in implemented_model_types()]
    assert fields["model_type"].choices == [m.value for m in ModelType]  # every OneTrainer model type trains
    assert fields["training_method"].choices == ["FINE_TUNE", "LORA", "EMBEDDING", "FINE_TUNE_VAE"]
    assert fields["optimizer.optimizer"].choices == [o.value for o in Optimizer if o in IMPLEMENTED_OPTIMIZERS]
    assert len(fields["optimizer.optimizer"].choices) == len(Optimizer) == 43  # every optimizer OneTrainer has
    dropdown = make_component(fields["optimizer.optimizer"]).component
    assert [value for _, value in dropdown.choices] == fields["optimizer.optimizer"].choices
    # other enums are offered in full
    by_path = {f.path: f for f in iter_fields(TrainConfig)}
    assert by_path["output_model_format"].choices == offered_values(type(TrainConfig().output_model_format))
    assert len(by_path["output_model_format"].choices) == len(type(TrainConfig().output_model_format))


@pytest.mark.parametrize(("values", "message"), [
    ({"model_type": "NOT_A_MODEL"}, "model_type: must be one of STABLE_DIFFUSION_15, "),
])
def test_our_config_naming_something_else_fails_to_load(values, message):
    with pytest.raises(ConfigError) as info:
        load_config({"config_version": 1, **values})
    assert len(info.value.errors) == 1 and info.value.errors[0].startswith(message), info.value.errors


def test_an_imported_onetrainer_config_naming_something_else_fails(tmp_path):
    preset = json.loads((ROOT / "tests" / "config" / "data" / "onetrainer-presets" / "sd-1.5-LoRA.json").read_text())
    path = tmp_path / "ot.json"
    path.write_text(json.dumps({**preset, "model_type": "NOT_A_MODEL", "optimizer": {"optimizer": "CAME_8BIT"}}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [e.split(":")[0] for e in info.value.errors] == ["model_type"] and "NOT_A_MODEL" in info.value.errors[0]
    # remembered settings of other optimizers (OneTrainer's UI state) are no reason to refuse
    path.write_text(json.dumps({**preset, "optimizer_defaults": {"MUON": {"optimizer": "MUON"}}}))
    assert load_config(path).config.model_type == ModelType.STABLE_DIFFUSION_15


def test_unavailable_is_silent_for_a_default_config():
    assert unavailable(TrainConfig()) == []
    assert unavailable(TrainConfig(training_method=TrainingMethod.LORA, model_type=ModelType.FLUX_FILL_DEV_1)) == []
