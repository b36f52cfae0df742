from __future__ import annotations

import pytest

from ot_gradio.config.enums import ModelType
from ot_gradio.config.families import FAMILIES
from ot_gradio.models import registry
from ot_gradio.models.registry import UnsupportedModelTypeError, get_family, register_family, supported_model_types


def test_sd15_is_registered():
    from ot_gradio.models.sd15 import StableDiffusion15

    assert get_family(ModelType.STABLE_DIFFUSION_15) is StableDiffusion15
    assert get_family("STABLE_DIFFUSION_15") is StableDiffusion15
    assert ModelType.STABLE_DIFFUSION_15 in supported_model_types()


@pytest.mark.parametrize("model_type", ["NOT_A_MODEL"])  # every OneTrainer model type trains now
def test_unsupported_type_names_the_supported_ones(model_type):
    with pytest.raises(UnsupportedModelTypeError, match="STABLE_DIFFUSION_15") as info:
        get_family(model_type)
    assert str(model_type) in str(info.value)


def test_a_type_cannot_be_registered_twice():
    with pytest.raises(ValueError, match="already"):
        register_family(ModelType.STABLE_DIFFUSION_15)(type("Other", (), {}))


@pytest.mark.parametrize("model_type", [t for t, info in FAMILIES.items() if info.implemented])
def test_the_family_class_has_the_facts_of_its_description(model_type):
    """The page reads the torch-free description, the trainer the class: registering gives the class them."""
    cls, info = get_family(model_type), FAMILIES[model_type]
    assert (cls.part_names, cls.denoiser, cls.text_encoder_names, cls.bucket_step, cls.schedule_kind, cls.inpainting) == (
        info.parts, info.denoiser, info.text_encoders, info.bucket_step, info.schedule, info.inpainting)


@pytest.mark.parametrize("model_type", [t for t, info in FAMILIES.items() if info.implemented])
def test_a_family_has_embedding_keys_exactly_when_it_offers_embeddings(model_type):
    """The EMBEDDING method saves one vector per text encoder under its key: a family that offers
    it names a key for every text encoder; one that does not names none."""
    from ot_gradio.config.enums import TrainingMethod

    cls, info = get_family(model_type), FAMILIES[model_type]
    if TrainingMethod.EMBEDDING in info.methods:
        assert set(cls.embedding_keys) == set(info.text_encoders), cls.embedding_keys
    else:
        assert cls.embedding_keys == {}


def test_a_family_class_does_not_declare_what_its_description_says(monkeypatch):
    monkeypatch.setattr(registry, "_FAMILIES", {})
    with pytest.raises(ValueError, match="Own declares bucket_step: these come from its description"):
        register_family(ModelType.SANA)(type("Own", (), {"bucket_step": 32}))
    monkeypatch.setattr(registry, "family_info", lambda model_type: None if model_type == ModelType.ERNIE else FAMILIES[model_type])
    with pytest.raises(ValueError, match="ERNIE has no description in config/family_info"):
        register_family(ModelType.ERNIE)(type("Undescribed", (), {}))
    with pytest.raises(ValueError, match="described differently"):
        register_family(ModelType.SANA, ModelType.STABLE_DIFFUSION_15)(type("Two", (), {}))
    # the name, hub repo and LoRA version: from a description that gives them (Sana's), else the class's own (SD 1.5's)
    with pytest.raises(ValueError, match="Named declares family_name: these come from its description"):
        register_family(ModelType.SANA)(type("Named", (), {"family_name": "Sana"}))
    sana = register_family(ModelType.SANA)(type("Sana", (), {}))
    assert (sana.family_name, sana.default_config_repo, sana.lora_base_model_version) == (
        "Sana", "Efficient-Large-Model/Sana_1600M_1024px_diffusers", "sana")
    own = register_family(ModelType.STABLE_DIFFUSION_15)(type("Own", (), {"default_config_repo": "mine", "lora_base_model_version": "v"}))
    assert (own.default_config_repo, own.lora_base_model_version, hasattr(own, "family_name")) == ("mine", "v", False)


INSTANCE_ONLY = {"layer_skips"}  # set in every family's __init__


def _contract_members() -> set[str]:
    from ot_gradio.models.base import ModelFamily

    declared = {n for n, v in vars(ModelFamily).items() if not n.startswith("_") and (isinstance(v, (property, classmethod)) or callable(v))}
    return (declared | set(ModelFamily.__annotations__)) - INSTANCE_ONLY


def _load_keywords(cls: type) -> set[str]:
    """The keywords `cls.load` takes, following `**kwargs` to the load it passes them on to."""
    import inspect

    for klass in cls.__mro__:
        if "load" in vars(klass):
            params = inspect.signature(klass.load).parameters
            named = {n for n, p in params.items() if p.kind == p.KEYWORD_ONLY or p.kind == p.POSITIONAL_OR_KEYWORD}
            if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
                return named
    return set()


@pytest.mark.parametrize("model_type", supported_model_types())
def test_every_family_has_the_contract(model_type):
    """The trainer calls these members on every family without probing (models/base.ModelFamily)."""
    import inspect

    from ot_gradio.models.base import ModelFamily

    cls = get_family(model_type)
    missing = sorted(name for name in _contract_members() if not hasattr(cls, name))
    assert not missing, f"{cls.__name__} lacks {missing}"
    wanted = {n for n in inspect.signature(ModelFamily.load).parameters if n not in ("cls", "name")}
    assert wanted <= _load_keywords(cls), f"{cls.__name__}.load does not take {sorted(wanted - _load_keywords(cls))}"
