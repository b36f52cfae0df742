"""The page's config survives reloads and restarts: it is kept in the workspace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..config.io import ConfigError, config_to_dict, load_config
from ..config.presets import apply_preset, load_preset
from ..config.schema import TrainConfig
from ..fsutil import atomic_write_json

UI_CONFIG = "ui-config.json"


def default_config() -> dict[str, Any]:
    return config_to_dict(TrainConfig())


def preset_config(name: str) -> dict[str, Any]:
    """Defaults with the preset's sparse overlay on top, validated."""
    data = apply_preset(default_config(), load_preset(name))
    return config_to_dict(load_config(data).config)


def load_ui_config(workspace: Path) -> dict[str, Any]:
    path = Path(workspace) / UI_CONFIG
    if path.is_file():
        try:
            return config_to_dict(load_config(json.loads(path.read_text(encoding="utf-8"))).config)
        except (ConfigError, ValueError, OSError):
            pass  # a broken file falls back to the demo; the user's runs are untouched
    try:
        return preset_config("demo")
    except (ConfigError, FileNotFoundError, ValueError):
        return default_config()


def save_ui_config(workspace: Path, config: dict[str, Any]) -> None:
    atomic_write_json(Path(workspace) / UI_CONFIG, config, indent=2)
