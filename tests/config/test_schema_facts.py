"""What an option's schema line says besides its label and bounds (fields.opt): when the page
shows it, where, and what the trainer makes of it. A slip here hides a field for good or lets a
backup continue another run, and nothing else would fail."""

from ot_gradio.config.conditions import is_, is_not, nonzero, on
from ot_gradio.config.fields import Section, iter_fields, opt
from ot_gradio.config.schema import TrainConfig
from ot_gradio.runner.startcheck import LAYER_PRESETS
from ot_gradio.training.memory_probe_cache import NOT_IN_STEP
from ot_gradio.training.resume import MUST_MATCH
from ot_gradio.ui.visibility import applies, conditional_fields, tab_order

FIELDS = list(iter_fields(TrainConfig))
TOP = {f.path for f in FIELDS if "." not in f.path and "[]" not in f.path}


def test_one_line_declares_every_fact_of_an_option():
    class Demo(Section):
        plain: bool = opt(False, "Plain", "Nothing but a label.")
        full: int = opt(1, "Full", "Every fact.", tab="training", applies_when=on("plain"), first=2, heading="Loss",
                        in_step=False, backup_must_match=True)

    plain, full = iter_fields(Demo)
    assert (plain.applies_when, plain.first, plain.heading, plain.in_step, plain.backup_must_match) == (None, 0, None, True, False)
    assert (full.first, full.heading, full.in_step, full.backup_must_match) == (2, "Loss", False, True)
    assert full.applies_when({"plain": True}) and not full.applies_when({})


def test_the_readers_take_them_from_the_schema():
    assert {f.path for f in FIELDS if f.applies_when is not None} == set(conditional_fields())
    assert NOT_IN_STEP == {f.path for f in FIELDS if not f.in_step} and {"epochs", "seed", "optimizer"} <= NOT_IN_STEP
    assert set(MUST_MATCH) == {f.path for f in FIELDS if f.backup_must_match} and "batch_size" in MUST_MATCH
    assert LAYER_PRESETS == next(f.choices for f in FIELDS if f.path == "layer_filter_preset")
    assert tab_order(["layer_filter", "lora_alpha", "peft_type"]) == ["peft_type", "lora_alpha", "layer_filter"]


def test_a_condition_reads_other_fields_of_the_schema():
    """A misspelt name would read as blank for ever: the field it governs never shows."""
    for f in FIELDS:
        if f.applies_when is not None:
            assert f.applies_when.reads and set(f.applies_when.reads) <= TOP - {f.path}, (f.path, f.applies_when.text)


def test_trainer_facts_are_on_top_level_fields():
    """The memory probe's key reads the config's top level only; the backup's check also a part's
    field (`text_encoder.train`), never a list item's, and its rules read top-level fields."""
    marked = [f.path for f in FIELDS if not f.in_step]
    assert marked and set(marked) <= TOP
    must = [f for f in FIELDS if f.backup_must_match]
    assert {"batch_size", "lora_alpha", "peft_type", "text_encoder.train"} <= {f.path for f in must}
    for f in must:
        assert "[]" not in f.path and f.path.split(".")[0] in TOP, f.path
        assert f.backup_must_match is True or set(f.backup_must_match.reads) <= TOP, f.path


def test_first_places_are_distinct_within_a_tab():
    places = [(f.tab, f.first) for f in FIELDS if f.first]
    assert places and len(places) == len(set(places))


def test_conditions_count_a_blank_value_as_stated():
    assert on("x")({"x": True}) and not on("x")({}) and not on("x")({"x": None})
    lokr = is_("peft", "LOKR", default="LORA")
    assert lokr({"peft": "LOKR"}) and not lokr({}) and not lokr({"peft": ""})
    assert is_not("peft", "LOKR", default="LORA")({"peft": None})
    assert is_("s", "A", "B")({"s": "B"}) and not is_("s", "A", "B")({})
    assert is_not("s", "CONSTANT")({}) and not is_not("s", "CONSTANT")({"s": "CONSTANT"})
    assert nonzero("w")({"w": 0.1}) and not nonzero("w")({"w": 0}) and nonzero("w")({"w": ""})  # blank: kept in view
    both = on("a") & on("b")
    assert both({"a": 1, "b": 1}) and not both({"a": 1}) and both.reads == ("a", "b") and both.text == "a is on and b is on"


def test_a_family_fact_decides_the_noise_schedule_options():
    assert applies("force_v_prediction", {"model_type": "STABLE_DIFFUSION_15"})
    assert not applies("force_v_prediction", {"model_type": "FLUX_DEV_1"})
    assert applies("vb_loss_strength", {}) and not applies("vb_loss_strength", {"model_type": "STABLE_DIFFUSION_15"})


def test_part_facts_are_on_part_settings_and_kept_by_the_separate_parts():
    """The page reads them for a model part's settings only, by the setting's name."""
    from ot_gradio.config.fields import field_meta
    from ot_gradio.config.parts import ModelPartConfig, SeparateModelPartConfig

    flags = ("on_frozen_part", "text_encoder_only")
    assert not [n for n in TrainConfig.model_fields if any(field_meta(TrainConfig, n).get(k) for k in flags)]
    shown = {n for n in ModelPartConfig.model_fields if field_meta(ModelPartConfig, n).get("on_frozen_part")}
    assert shown == {"weight_dtype", "model_name"}
    for name in SeparateModelPartConfig.model_fields:
        assert [field_meta(SeparateModelPartConfig, name).get(k) for k in flags] == [field_meta(ModelPartConfig, name).get(k) for k in flags], name


def test_a_parts_train_must_match_only_where_the_models_lora_trains_that_part():
    """`train` is one line for every part section; its rule is bound to the section that holds it."""
    from ot_gradio.config.conditions import PartRule, Rule

    rules = {f.path: f.backup_must_match for f in FIELDS if f.path.endswith(".train") and f.backup_must_match}
    assert rules and all(isinstance(r, Rule) and not isinstance(r, PartRule) for r in rules.values())
    sd15, flux = {"training_method": "LORA", "model_type": "STABLE_DIFFUSION_15"}, {"training_method": "LORA", "model_type": "FLUX_DEV_1"}
    assert [p for p, r in rules.items() if r(sd15)] == ["unet.train", "text_encoder.train"]
    assert [p for p, r in rules.items() if r(flux)] == ["transformer.train", "text_encoder.train", "text_encoder_2.train"]
    assert not any(r({**flux, "training_method": "FINE_TUNE"}) for r in rules.values())
    assert rules["vae.train"].text == "training_method is LORA and the model type's LoRA trains vae"
