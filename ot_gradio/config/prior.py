"""What trains towards the base model's own prediction (the model with the LoRA turned off, as
OneTrainer's prior model): masked prior preservation outside the mask, and PRIOR_PREDICTION
concepts, whose images are trained with that prediction as the target instead of their own noise
(regularisation: the model keeps what it drew for those captions before). Both need a LoRA."""

from __future__ import annotations

from typing import Any

from .enums import ConceptType, TrainingMethod


def prior_concepts(config: Any) -> list[int]:
    """The indexes of the enabled PRIOR_PREDICTION concepts."""
    return [i for i, c in enumerate(config.concepts) if c.enabled and ConceptType(c.type) == ConceptType.PRIOR_PREDICTION]


def base_model_fields(config: Any) -> list[str]:
    """The options of this run that read the base model's prediction."""
    fields = ["masked_prior_preservation_weight"] if config.masked_training and config.masked_prior_preservation_weight > 0 else []
    return fields + [f"concepts[{i}].type" for i in prior_concepts(config)]


def prior_problems(config: Any) -> list[str]:
    """masked_prior_preservation_weight needs masked training; it and PRIOR_PREDICTION concepts
    need a LoRA (the base model is the model with the LoRA turned off)."""
    out = []
    method = TrainingMethod(config.training_method)
    if config.masked_prior_preservation_weight > 0:
        if not config.masked_training:
            out.append("masked_prior_preservation_weight: it works outside the mask of masked training; turn masked_training on, "
                       "or set it to 0.")
        if method != TrainingMethod.LORA:
            out.append(f"masked_prior_preservation_weight: the base model it pulls towards is the model with the LoRA turned off, "
                       f"so it needs training_method LORA, not {method.value}; set it to 0.")
    if method != TrainingMethod.LORA:
        out += [f"concepts[{i}].type: a PRIOR_PREDICTION concept trains towards the base model's prediction (the model with the "
                f"LoRA turned off, as in OneTrainer), so it needs training_method LORA, not {method.value}; set its type to "
                f"STANDARD or train a LORA." for i in prior_concepts(config)]
    return out
