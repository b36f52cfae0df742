"""The page's config survives reloads and restarts: it is kept in the workspace."""

from __future__ import annotations

import copy
import logging
import os
import sys
from pathlib import Path
from typing import Any

from ..config.io import ConfigError, config_to_dict, load_config, read_json
from ..config.presets import apply_preset, load_preset
from ..config.schema import TrainConfig
from ..fsutil import atomic_write_json
from ..secrets import store_config_token, take_secrets

UI_CONFIG = "ui-config.json"
log = logging.getLogger(__name__)


def default_config() -> dict[str, Any]:
    return config_to_dict(TrainConfig())


# Paths of a preset that may sit under "workspace/" (the CLI's and the app's default workspace
# folder, relative to where a command runs).
PRESET_PATHS = ("workspace_dir", "cache_dir", "output_model_destination", "debug_dir")


def in_workspace(config: dict[str, Any], workspace: str | os.PathLike) -> dict[str, Any]:
    """The config with its relative paths under "workspace/" moved under `workspace` (the app's
    --workspace folder), absolute, so the General tab shows where runs and models will land. A
    preset's "workspace/demo" means "demo in the workspace": read against the folder the app was
    started in, it put runs and models outside an app started with --workspace elsewhere."""
    root = Path(workspace).resolve()

    def moved(value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            return value
        parts = Path(value.replace("\\", "/")).parts
        if Path(value).is_absolute() or not parts or parts[0] != "workspace":
            return value
        return str(root.joinpath(*parts[1:]))

    config = copy.deepcopy(config)
    for key in PRESET_PATHS:
        if key in config:
            config[key] = moved(config[key])
    for concept in config.get("concepts") or []:
        if isinstance(concept, dict):
            concept["path"] = moved(concept.get("path"))
    return config


def preset_config(name: str, workspace: str | os.PathLike | None = None) -> dict[str, Any]:
    """Defaults with the preset's sparse overlay on top, validated; with `workspace`, its
    "workspace/..." paths are under that folder (see in_workspace)."""
    data = apply_preset(default_config(), load_preset(name))
    config = config_to_dict(load_config(data).config)
    return in_workspace(config, workspace) if workspace is not None else config


def load_ui_config(workspace: Path) -> dict[str, Any]:
    path = Path(workspace) / UI_CONFIG
    if path.exists():
        try:
            data = read_json(path)
            if isinstance(data, dict) and take_secrets(data, workspace):  # a token an older version autosaved here
                data.pop("secrets", None)
                atomic_write_json(path, data, indent=2)
            return config_to_dict(load_config(data).config)
        except (ConfigError, ValueError, OSError, RecursionError) as err:
            _move_aside(path, err)  # the page starts with the demo; the user's runs are untouched
    try:
        return preset_config("demo", workspace)
    except (ConfigError, FileNotFoundError, ValueError):
        return default_config()


def _move_aside(path: Path, err: Exception) -> None:
    """An autosaved config that cannot be read is kept beside, under a new name, and never read
    again: it must not keep the page from starting (nor be overwritten by the next autosave)."""
    target = path.with_name(f"{path.name}.unreadable")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.unreadable-{n}")
    first = str(err).splitlines()[0][:300]
    try:
        os.replace(path, target)
        message = f"{path} could not be read ({first}); moved to {target.name}, starting with the demo config"
    except OSError as move_err:
        message = f"{path} could not be read ({first}) nor moved aside ({move_err}); starting with the demo config"
    log.warning(message)
    print(f"warning: {message}", file=sys.stderr)


def save_ui_config(workspace: Path, config: dict[str, Any]) -> None:
    """The page's config, for the next visit; its hub token goes to the workspace's owner-only
    secrets.json, never into this file (ot_gradio/secrets.py)."""
    atomic_write_json(Path(workspace) / UI_CONFIG, store_config_token(config, workspace), indent=2)


UI_CHOICES = "ui-choices.json"  # the top bar's Preset and Config file, beside the config


def load_ui_choices(workspace: Path) -> dict[str, str]:
    """The preset last loaded and the config file last loaded or saved, so a reload shows them."""
    path = Path(workspace) / UI_CHOICES
    if not path.is_file():
        return {}
    try:
        data = read_json(path)
    except ConfigError:
        return {}
    return {k: v for k, v in data.items() if k in ("preset", "config_path") and isinstance(v, str)} if isinstance(data, dict) else {}


def save_ui_choice(workspace: Path, **choice: str) -> None:
    try:
        atomic_write_json(Path(workspace) / UI_CHOICES, {**load_ui_choices(workspace), **choice}, indent=2)
    except OSError:
        pass  # only a convenience: the config itself is saved on its own
