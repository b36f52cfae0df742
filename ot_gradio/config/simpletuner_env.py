"""SimpleTuner's config.env (its first config format, still read, and the one many guides use):
`export NAME=value` lines whose fixed names stand for its arguments (MODEL_FAMILY for
--model_family, MAX_NUM_STEPS for --max_train_steps ...), and TRAINER_EXTRA_ARGS with any other
`--argument=value`. Read as text only: no line runs, no variable is expanded.
"""

from __future__ import annotations

import shlex
from typing import Any

from .validation import ConfigError

# its environment names -> its arguments (SimpleTuner's env_file.py), those that say what is trained
NAMES = {
    "MODEL_TYPE": "model_type", "MODEL_NAME": "pretrained_model_name_or_path", "MODEL_FAMILY": "model_family",
    "MODEL_FLAVOUR": "model_flavour", "OUTPUT_DIR": "output_dir", "DATALOADER_CONFIG": "data_backend_config",
    "RESUME_CHECKPOINT": "resume_from_checkpoint", "TRAINING_SEED": "seed", "MAX_NUM_STEPS": "max_train_steps",
    "NUM_EPOCHS": "num_train_epochs", "TRAIN_BATCH_SIZE": "train_batch_size", "GRADIENT_ACCUMULATION_STEPS": "gradient_accumulation_steps",
    "LEARNING_RATE": "learning_rate", "LR_SCHEDULE": "lr_scheduler", "LR_WARMUP_STEPS": "lr_warmup_steps", "LR_END": "lr_end",
    "OPTIMIZER": "optimizer", "MIXED_PRECISION": "mixed_precision", "BASE_MODEL_PRECISION": "base_model_precision",
    "QUANTIZE_VIA": "quantize_via", "LORA_TYPE": "lora_type", "LYCORIS_CONFIG": "lycoris_config", "USE_DORA": "use_dora",
    "RESOLUTION": "resolution", "RESOLUTION_TYPE": "resolution_type", "MINIMUM_RESOLUTION": "minimum_image_size",
    "ASPECT_BUCKET_ROUNDING": "aspect_bucket_rounding", "CAPTION_DROPOUT_PROBABILITY": "caption_dropout_probability",
    "USE_GRADIENT_CHECKPOINTING": "gradient_checkpointing", "USE_EMA": "use_ema", "CHECKPOINTING_STEPS": "checkpoint_step_interval",
    "CHECKPOINT_STEP_INTERVAL": "checkpoint_step_interval", "CHECKPOINTING_LIMIT": "checkpoints_total_limit",
    "VALIDATION_PROMPT": "validation_prompt", "VALIDATION_STEPS": "validation_step_interval",
    "VALIDATION_STEP_INTERVAL": "validation_step_interval", "VALIDATION_RESOLUTION": "validation_resolution",
    "VALIDATION_GUIDANCE": "validation_guidance", "VALIDATION_NUM_INFERENCE_STEPS": "validation_num_inference_steps",
    "VALIDATION_SEED": "validation_seed", "VALIDATION_NEGATIVE_PROMPT": "validation_negative_prompt",
    "FLUX_GUIDANCE_VALUE": "flux_guidance_value", "FLUX_LORA_TARGET": "flux_lora_target", "TRAINING_NUM_PROCESSES": "num_processes",
    "PUSH_TO_HUB": "push_to_hub", "PUSH_CHECKPOINTS": "push_checkpoints_to_hub", "HUB_MODEL_NAME": "hub_model_id",
    "TRACKER_PROJECT_NAME": "tracker_project_name", "TRACKER_RUN_NAME": "tracker_run_name", "DISABLE_BENCHMARK": "disable_benchmark",
}
EXTRA = "TRAINER_EXTRA_ARGS"


def parse_env_text(raw: bytes, label: str) -> dict[str, Any]:
    """config.env text -> SimpleTuner's arguments (its names without `--`), or ConfigError."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: is not UTF-8 text; save it as UTF-8") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        name, sep, value = line.partition("=")
        if not sep:
            continue
        append = name.endswith("+")
        name = name.rstrip("+").strip()
        try:
            parts = shlex.split(value, comments=True)
        except ValueError:
            raise ConfigError(f"{label}: line {number}: an unclosed quote") from None
        value = " ".join(parts)
        values[name] = f"{values.get(name, '')} {value}".strip() if append else value
    out: dict[str, Any] = {NAMES[k]: v for k, v in values.items() if k in NAMES}
    tokens = values.get(EXTRA, "").split()
    for at, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        key, sep, value = token[2:].partition("=")
        if not sep:  # `--key value`, or a flag
            value = tokens[at + 1] if at + 1 < len(tokens) and not tokens[at + 1].startswith("--") else "true"
        out[key] = value
    if "model_family" not in out:
        raise ConfigError(f"{label}: no MODEL_FAMILY (nor --model_family in TRAINER_EXTRA_ARGS); a SimpleTuner config.env names it")
    return out
