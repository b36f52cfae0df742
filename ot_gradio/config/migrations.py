"""Versioned migrations of our config layout: ``MIGRATIONS[n]`` turns a version-n dict into n+1.

Version 0 is a file without ``config_version``: OneTrainer's layout (ours started from it), where
``concepts`` and ``samples`` may be null (kept in separate files) and ``__version`` is OneTrainer's
own counter. Every migration takes and returns a plain dict and must accept sparse dicts (presets).
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

from .schema import CONFIG_VERSION
from .validation import ConfigError


def _from_0(data: dict[str, Any]) -> dict[str, Any]:
    """OneTrainer layout -> version 1: inline lists instead of null, no OneTrainer version keys."""
    data = strip_ot_versions(data)
    for key in ("concepts", "samples", "additional_embeddings", "scheduler_params"):
        if key in data and data[key] is None:
            data[key] = []
    return data


def _from_1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: a part's `gradient_checkpointing` was a bool; now AUTO/ON/OFF (the memory
    planner's AUTO is the new default). A stored true/false means ON/OFF, as it did."""
    for value in data.values():
        if isinstance(value, dict) and isinstance(value.get("gradient_checkpointing"), bool):
            value["gradient_checkpointing"] = "ON" if value["gradient_checkpointing"] else "OFF"
    return data


def _from_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 -> 3: a FINE_TUNE's layer preset now picks the denoiser weights it trains, as in
    OneTrainer; a version-2 fine-tune trained every weight whatever its preset said (often a LoRA
    preset's attn-mlp), so it keeps training every weight ("full"). Not for OneTrainer's layout,
    whose fine-tunes always read the preset."""
    if data.get("training_method") == "FINE_TUNE" and data.get("layer_filter_preset", "full") != "full":
        data["layer_filter_preset"] = "full"
    return data


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    0: _from_0,
    1: _from_1,
    2: _from_2,
}
OURS_ONLY = {2}  # migrations of our own earlier layouts: a OneTrainer config (version 0) already has the new meaning


def strip_ot_versions(value: Any) -> Any:
    """Remove OneTrainer's ``__version`` from every level (it writes one into each nested group)."""
    if isinstance(value, dict):
        return {k: strip_ot_versions(v) for k, v in value.items() if k != "__version"}
    if isinstance(value, list):
        return [strip_ot_versions(v) for v in value]
    return value


def config_version_of(data: dict[str, Any]) -> int:
    version = data.get("config_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ConfigError(f"config_version: must be a whole number from 0 to {CONFIG_VERSION} (got {version!r})")
    if version > CONFIG_VERSION:
        raise ConfigError(f"config_version: this file is version {version}, newer than this program understands ({CONFIG_VERSION}); update ot_gradio")
    return version


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a config dict of any known version to CONFIG_VERSION. Returns a new dict."""
    version = start = config_version_of(data)
    data = deepcopy(data)
    while version < CONFIG_VERSION:
        if not (version in OURS_ONLY and start == 0):
            data = MIGRATIONS[version](data)
        version += 1
        data["config_version"] = version
    return data
