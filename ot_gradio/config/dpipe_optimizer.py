"""A diffusion-pipe config's `[optimizer]` (config/dpipe_import.py): its `type` (case-insensitive; the
pytorch_optimizer names, which it falls back to, as written) with that library's own defaults
where the file is silent, `lr`, `betas`, the keys it passes on, `gradient_release`."""

from __future__ import annotations

from typing import Any

from .dpipe_data import DpSection as Section
from .validation import ConfigError

# diffusion-pipe's optimizer type (case-insensitive; pytorch_optimizer's names as written) -> ours and the
# library's defaults where ours differ
OPTIMIZERS: dict[str, tuple[str, dict[str, float]]] = {
    "adamw": ("ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}),
    "adamw8bit": ("ADAMW_8BIT", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}),
    "adamw8bitkahan": ("ADAMW_8BIT", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}),
    "adamw_optimi": ("ADAMW", {"beta1": 0.9, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.01}),
    "stableadamw": ("ADAMW", {"beta1": 0.9, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.01}),
    "offload": ("ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}),
    "sgd": ("SGD", {"weight_decay": 0.0}),
    # pytorch_optimizer's (as diffusion-pipe names them: case-sensitive)
    "Prodigy": ("PRODIGY", {"beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0, "decouple": True, "use_bias_correction": False,
                            "safeguard_warmup": False, "d_coef": 1.0, "eps": 1e-8}),
    "CAME": ("CAME", {"beta1": 0.9, "beta2": 0.999, "beta3": 0.9999, "weight_decay": 0.0}),
    "Lion": ("LION", {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}),
    "AdaFactor": ("ADAFACTOR", {"beta1": 0.9, "weight_decay": 0.0, "relative_step": True, "scale_parameter": True, "warmup_init": False}),
    "ScheduleFreeAdamW": ("SCHEDULE_FREE_ADAMW", {"beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0, "eps": 1e-8}),
    "automagic": ("PRODIGY", {}),  # its own rate per weight, adapted as it goes: Prodigy adapts the rate here
}
OPTIMIZER_NOTES = {"automagic": "it adapts each weight's rate by itself, which no optimizer here does; PRODIGY, which adapts the "
                                 "rate, is used at lr 1","adamw8bitkahan": "Kahan summation of bfloat16 weights is stochastic rounding here",
                   "stableadamw": "StableAdamW's update clipping is not applied here (AdamW)",
                   "offload": "the optimizer state is kept on the GPU here"}
OPTIMIZER_PARAMS = {"weight_decay": "weight_decay", "eps": "eps", "d_coef": "d_coef", "use_bias_correction": "use_bias_correction",
                    "bias_correction": "use_bias_correction", "safeguard_warmup": "safeguard_warmup", "momentum": "momentum",
                    "nesterov": "nesterov", "decouple": "decouple", "weight_decouple": "decouple",
                    "relative_step": "relative_step", "scale_parameter": "scale_parameter", "warmup_init": "warmup_init"}
# the learning rate each optimizer's library takes when none is given (None: it needs one)
DEFAULT_LR = {"adamw": 1e-3, "adamw8bit": 1e-3, "adamw8bitkahan": 1e-3, "offload": 1e-3, "adamw_optimi": None, "stableadamw": None,
              "sgd": None, "Prodigy": 1.0, "CAME": 2e-4, "Lion": 1e-4, "AdaFactor": 1e-3, "ScheduleFreeAdamW": 2.5e-3}

def optimizer_settings(r: Section, out: dict[str, Any], notes: list[str]) -> None:
    name = str(r.get("type") or "adamw").strip()
    key = name if name in OPTIMIZERS else name.lower()
    if key not in OPTIMIZERS:
        notes.append(f"optimizer.type '{name}' has no counterpart here: ADAMW with torch's defaults is used (choose one on the "
                     "Training tab)")
        key = "adamw"
    ours, defaults = OPTIMIZERS[key]
    if key in OPTIMIZER_NOTES:
        notes.append(f"optimizer.type '{name}': {OPTIMIZER_NOTES[key]}")
    optimizer: dict[str, Any] = {"optimizer": ours, **defaults}
    lr = r.number("lr", None)
    if key == "automagic":
        lr = 1.0
    elif lr is None:
        lr = DEFAULT_LR.get(key)
        if lr is None:
            raise ConfigError(f"optimizer.lr: diffusion-pipe's {name} needs a learning rate; this config has none")
        notes.append(f"optimizer.lr: not set, so {lr:g} (the optimizer's own default, as diffusion-pipe passes none)")
    out["learning_rate"] = lr
    betas = r.get("betas")
    if isinstance(betas, list) and len(betas) >= 2:
        try:
            optimizer.update(beta1=float(betas[0]), beta2=float(betas[1]), **({"beta3": float(betas[2])} if len(betas) > 2 else {}))
        except (TypeError, ValueError):
            raise ConfigError(f"optimizer.betas: {betas!r} is not a list of numbers (diffusion-pipe config)") from None
    for key_name, value in r.data.items():
        if key_name in OPTIMIZER_PARAMS and isinstance(value, (bool, int, float)):  # (a list, e.g. automagic's eps pair: listed)
            r.used.add(key_name)
            optimizer[OPTIMIZER_PARAMS[key_name]] = value if isinstance(value, bool) else float(value)
    if ours == "ADAMW_8BIT" or ours == "ADAMW":
        r.get("stabilize")  # AdamW8bitKahan's option, off by default
        r.get("kahan_sum")
    out["optimizer"] = optimizer
    if r.flag("gradient_release"):  # each weight steps as its gradient is ready, unclipped, every batch
        optimizer["fused_back_pass"] = True
        out["_release"] = True
