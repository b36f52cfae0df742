"""Presets: sparse JSON overlays of the config, as in OneTrainer. A preset names only what it
changes; applying it deep-merges it onto a base config dict (objects merge, lists are replaced)."""

from __future__ import annotations

from copy import deepcopy
from pathlib import Path
from typing import Any

from .families import family_info
from .io import apply_overrides, config_to_dict, load_config, read_json
from .kohya_import import is_kohya_config
from .migrations import migrate
from .onetrainer import is_onetrainer_config, to_our_layout
from .ot_steps import batch_counted_steps
from .validation import ConfigError, LoadResult, validate

PRESETS_DIR = Path(__file__).resolve().parents[2] / "presets"


def list_presets(directory: str | Path | None = None) -> list[str]:
    """Preset names (file names without .json), sorted."""
    folder = Path(directory) if directory is not None else PRESETS_DIR
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def resolve_preset_path(name: str, directory: str | Path | None = None) -> Path | None:
    """A preset name ("demo", "sd15-lora.json") or a path to a preset file -> its path, or None."""
    folder = Path(directory) if directory is not None else PRESETS_DIR
    candidates = [Path(name), folder / name, folder / f"{name}.json"]
    return next((p for p in candidates if p.is_file()), None)


def load_preset(name: str, directory: str | Path | None = None) -> dict[str, Any]:
    """The overlay dict of a preset (ours, or a OneTrainer preset converted to our keys), brought
    to the current config version. Not validated: it is only a part of a config."""
    path = resolve_preset_path(name, directory)
    if path is None:
        available = ", ".join(list_presets(directory)) or "none"
        raise ConfigError(f"preset {name!r} not found (available: {available})")
    data = read_json(path)
    if is_onetrainer_config(data):
        data = to_our_layout(data)
        batch_counted_steps(data)  # a preset setting accumulation counts its steps in batches too
        data["config_version"] = 0
    return migrate(data)


def apply_preset(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Deep merge: ``overlay`` wins; nested objects are merged key by key, lists replaced whole."""
    merged = deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = apply_preset(merged[key], value)
        else:
            merged[key] = deepcopy(value)
    return merged


def load_config_argument(config_path: str, overrides: list[str] | None = None) -> tuple[LoadResult, bool]:
    """What a command's `--config` names (a JSON file, ours or OneTrainer's, or a preset name), with
    its `--set KEY.PATH=VALUE` overrides applied: (the loaded config, whether it was OneTrainer's).
    Raises ConfigError naming `--config` or the overridden field."""
    path = Path(config_path)
    if not path.exists():
        found = resolve_preset_path(config_path)
        if found is None:
            raise ConfigError(f"--config: {config_path} does not exist (give a JSON file or a preset name)")
        path = found
    data = read_json(path, "--config")
    kohya = is_kohya_config(data)
    from_ot = is_onetrainer_config(data) and not kohya
    if overrides and (from_ot or kohya):
        # another trainer's file: `--set` names our fields, so it applies to what the file became
        loaded = load_config(data, base_dir=path.parent, source=str(path))
        return LoadResult(validate(apply_overrides(config_to_dict(loaded.config), overrides)), loaded.warnings), from_ot
    if overrides:
        data = apply_overrides(data, overrides)
    return load_config(data, base_dir=path.parent, source=str(path)), from_ot


def default_base_model(model_type: str | None) -> str | None:
    """The base model of the model type's own preset (the one the guide names), or None."""
    info = family_info(str(model_type))
    if info is None or not info.preset:
        return None
    try:
        value = load_preset(info.preset).get("base_model_name")
    except Exception:  # noqa: BLE001 - a broken preset file only means no default to offer
        return None
    return value if isinstance(value, str) and value else None


def base_model_after_type_change(old_type: str | None, new_type: str | None, base: str | None) -> str | None:
    """The new model type's default base model when the model type changes and the base model is
    empty or still the old type's default; None (keep it) for a base model the user chose."""
    if old_type == new_type:
        return None
    name = str(base or "").strip()
    if name and name != default_base_model(old_type):
        return None
    new = default_base_model(new_type)
    return new if new and new != name else None
