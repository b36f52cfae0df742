"""What the trainer trains, without importing torch: the model types, training methods and
optimizers the page offers (config/fields.py gives them to the dropdowns), and the check that
refuses a config naming another one when it is loaded or imported (config/validation.py).

The schema's enums keep every OneTrainer name so its configs still parse; this is the subset
that trains here. The families come from config/families.py (`implemented`); the optimizers are
the ones training/optimizers/entries.py registers, listed here because the page cannot import
the registry (tests/config/test_catalogue.py checks that the two lists agree).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from .enums import GGUF_TYPES, DataType, ModelType, Optimizer, TrainingMethod
from .enums import Optimizer as O
from .families import IMPLEMENTED_METHODS, implemented_model_types

IMPLEMENTED_OPTIMIZERS: tuple[Optimizer, ...] = (
    O.ADAGRAD, O.ADAGRAD_8BIT, O.ADAM, O.ADAM_8BIT, O.ADAMW, O.ADAMW_8BIT, O.LAMB, O.LAMB_8BIT, O.LARS, O.LARS_8BIT,
    O.LION, O.LION_8BIT, O.RMSPROP, O.RMSPROP_8BIT, O.SGD, O.SGD_8BIT, O.DADAPT_ADA_GRAD, O.DADAPT_ADAM, O.DADAPT_ADAN,
    O.DADAPT_LION, O.DADAPT_SGD, O.PRODIGY, O.ADAFACTOR, O.CAME, O.SCHEDULE_FREE_ADAMW, O.SCHEDULE_FREE_SGD, O.ADEMAMIX,
    O.ADEMAMIX_8BIT, O.ADAMW_ADV, O.ADOPT_ADV, O.LION_ADV, O.SIGNSGD_ADV, O.PRODIGY_ADV, O.PRODIGY_PLUS_SCHEDULE_FREE, O.ADOPT,
    O.ADABELIEF, O.TIGER, O.AIDA, O.YOGI, O.MUON, O.MUON_ADV, O.ADAMUON_ADV, O.CAME_8BIT,
)

# Why a OneTrainer name is refused, where there is more to say than "not implemented yet".
NOT_AVAILABLE_BECAUSE: dict[Enum, str] = {}


def offered(enum: type[Enum]) -> tuple[Enum, ...]:
    """The members of `enum` a user can pick: the implemented ones for model types, training
    methods and optimizers, the data types but the GGUF ones (the transformer's weight type dropdown
    adds them for the families that read .gguf files, ui/visibility.py), every member of any other
    enum (in the enum's order)."""
    if enum is DataType:
        return tuple(m for m in enum if m not in GGUF_TYPES)
    if enum is ModelType:
        implemented = set(implemented_model_types())
    elif enum is TrainingMethod:
        implemented = set(IMPLEMENTED_METHODS)
    elif enum is Optimizer:
        implemented = set(IMPLEMENTED_OPTIMIZERS)
    else:
        return tuple(enum)
    return tuple(m for m in enum if m in implemented)


def offered_values(enum: type[Enum]) -> list[str]:
    return [m.value for m in offered(enum)]


# (field path, how to read it from a config, what the value names)
_CHECKED = (
    ("model_type", lambda c: c.model_type, "model type"),
    ("training_method", lambda c: c.training_method, "training method"),
    ("optimizer.optimizer", lambda c: c.optimizer.optimizer, "optimizer"),
)


def model_type_problem(value: Any) -> str | None:
    """The line `unavailable` gives for a OneTrainer model type the trainer does not implement,
    read from raw config data: such a config is refused with this line alone, whatever else in it
    the schema would question (a preset of a model type not trained here may name options of its own)."""
    if not isinstance(value, str) or value not in ModelType.__members__ or ModelType(value) in offered(ModelType):
        return None
    return (f"model_type: {value} is a OneTrainer model type this trainer does not implement yet; "
            f"choose one of {', '.join(offered_values(ModelType))}")


def unavailable(config: Any) -> list[str]:
    """One `field: problem` line per model type, training method or optimizer the trainer does
    not implement (the schema accepts every OneTrainer name so that the message can say so)."""
    out = []
    for path, read, what in _CHECKED:
        value = read(config)
        choices = offered(type(value))
        if value not in choices:
            why = f" ({NOT_AVAILABLE_BECAUSE[value]})" if value in NOT_AVAILABLE_BECAUSE else ""
            out.append(f"{path}: {value.value} is a OneTrainer {what} this trainer does not implement yet{why}; "
                       f"choose one of {', '.join(m.value for m in choices)}")
    return out
