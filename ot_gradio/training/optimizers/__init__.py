"""Optimizers: one registry entry per optimizer, with OneTrainer's names and defaults.

`entries.py` holds the registry lines, `registry.py` how settings are resolved and an optimizer is
built, `stochastic_rounding.py` and `fused_back_pass.py` the two settings that act around the
optimizer, `kernels.py` the choice of fused / foreach / plain step, `muon.py` the Muon optimizers and their split of the weights, `trust_ratio.py` the fix that lets LAMB and LARS move all-zero weights (LoRA up matrices). The defaults table is config/optimizer_defaults.json (OneTrainer's own).
"""

from . import entries, kernels  # noqa: F401  (entries fills the registry)
from .fused_back_pass import FusedBackPass, fused_back_pass, set_stepping
from .muon import parameter_names, split_for_muon
from .registry import (
    LIBRARY_LACKS,
    NOT_CONSTRUCTOR_ARGS,
    OPTIMIZERS,
    OptimizerEntry,
    create_optimizer,
    optimizer_eval_mode,
    optimizer_train_mode,
    register,
    resolve_settings,
)

__all__ = [
    "LIBRARY_LACKS", "NOT_CONSTRUCTOR_ARGS", "OPTIMIZERS", "FusedBackPass", "OptimizerEntry", "create_optimizer", "fused_back_pass", "set_stepping",
    "optimizer_eval_mode", "optimizer_train_mode", "parameter_names", "register", "resolve_settings", "split_for_muon",
]
