"""GGUF transformer weights (OneTrainer's weight types GGUF, GGUF_A8_FLOAT and GGUF_A8_INT): the
transformer comes from a .gguf file given as transformer.model_name and keeps its quantized
weights, frozen under a LoRA, for the families whose description says `gguf` (their .gguf files
load into diffusers' GGUF layers; the A8 types run those layers' matmuls in 8 bits). What a run
cannot start with is refused here, before the model loads."""

from __future__ import annotations

from typing import Any

from .enums import GGUF_TYPES, DataType, ModelType, TrainingMethod
from .families import FAMILIES, family_info

GGUF_MODEL_TYPES = tuple(m for m, info in FAMILIES.items() if info.gguf)


def is_gguf_file(name: str) -> bool:
    return str(name or "").strip().lower().endswith(".gguf")


def gguf_problems(config: Any) -> list[str]:
    """One line per GGUF setting the run cannot start with, naming the field to change."""
    info = family_info(config.model_type)
    if info is None:
        return []
    out = [f"{part}.weight_dtype: {DataType(getattr(config, part).weight_dtype).value} is a weight type of the transformer (from "
           f"a .gguf transformer file); choose another one for the {part}"
           for part in info.parts if part != "transformer" and getattr(config, part).weight_dtype in GGUF_TYPES]
    if "transformer" not in info.parts:
        return out
    part = config.transformer
    gguf, file = part.weight_dtype in GGUF_TYPES, is_gguf_file(part.model_name)
    kind = DataType(part.weight_dtype).value if gguf else "GGUF"
    if not (gguf or file):
        return out
    if not info.gguf:
        field = "transformer.weight_dtype" if gguf else "transformer.model_name"
        return [*out, f"{field}: {ModelType(config.model_type).value} does not load .gguf transformer files ({kind} is offered for "
                      f"{', '.join(m.value for m in GGUF_MODEL_TYPES)}); use a .safetensors transformer with FLOAT_8, INT_8 or NFLOAT_4."]
    if not file:
        out.append(f"transformer.model_name: {kind} weights (transformer.weight_dtype) come from a .gguf transformer file; give its "
                   "path or Hugging Face file address here, or choose another weight type.")
    elif not gguf:
        out.append(f"transformer.weight_dtype: transformer.model_name is a .gguf file, which loads as GGUF; set GGUF (or "
                   f"GGUF_A8_INT / GGUF_A8_FLOAT), not {DataType(part.weight_dtype).value}.")
    if config.training_method == TrainingMethod.FINE_TUNE and part.train:
        out.append(f"transformer.train: {kind} weights cannot be trained (a fine-tune would train them); train a LoRA on them, or "
                   "turn off training the transformer, or fine-tune a .safetensors transformer.")
    return out
