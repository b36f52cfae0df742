"""Reading and writing configs: ours (versioned, migrated) and OneTrainer's (imported), plus the
CLI's ``--set key.path=value`` overrides."""

from __future__ import annotations

import json
import re
import typing
from copy import deepcopy
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ot_gradio.fsutil import atomic_write_json

from .. import jsontext
from .aitoolkit_import import import_aitoolkit, is_aitoolkit_config
from .dpipe_import import import_dpipe, is_dpipe_config
from .fields import nested_section, strip_optional
from .json_file import check_shape, read_json
from .kohya_import import import_kohya, is_kohya_config
from .migrations import MIGRATIONS, migrate
from .onetrainer import import_onetrainer, is_onetrainer_config
from .schema import CONFIG_VERSION, TrainConfig
from .simpletuner_import import import_simpletuner, is_simpletuner_config
from .validation import ConfigError, LoadResult, strip_unknown, unknown_keys_warning, validate

__all__ = [
    "CONFIG_VERSION", "MIGRATIONS", "ConfigError", "LoadResult", "apply_overrides", "config_to_dict",
    "load_config", "read_json", "save_config",
]


def load_config(path_or_dict: str | Path | dict[str, Any], *, base_dir: str | Path | None = None, source: str | None = None,
                readable: list[Path] | None = None) -> LoadResult:
    """Our config (any version), a OneTrainer config/preset, a kohya_ss / musubi-tuner config, an
    ai-toolkit job, a diffusion-pipe or a SimpleTuner config -> a validated TrainConfig.

    Unknown keys are dropped with one warning naming each; invalid values raise ConfigError.
    ``base_dir`` is where relative concept/sample files of a OneTrainer config are looked up
    (default: the file's folder). ``readable``: the folders an import may read files and list
    folders in (the page's; None: anywhere, the command line's)."""
    if isinstance(path_or_dict, dict):
        data = path_or_dict
        check_shape(data)
    else:
        data = read_json(path_or_dict)
        base_dir = base_dir if base_dir is not None else Path(path_or_dict).parent
        source = source or str(path_or_dict)
    if is_aitoolkit_config(data):
        return import_aitoolkit(data, source=source, readable=readable)
    if problem := dataset_file_problem(data):
        raise ConfigError(f"{source or 'config'}: {problem}")
    if is_simpletuner_config(data):
        return import_simpletuner(data, source=source, readable=readable, base_dir=base_dir)
    if is_dpipe_config(data):
        return import_dpipe(data, source=source, readable=readable, base_dir=base_dir)
    if is_kohya_config(data):
        return import_kohya(data, source=source, readable=readable, base_dir=base_dir)
    if is_onetrainer_config(data):
        return import_onetrainer(data, base_dir=base_dir, source=source, readable=readable)
    data, unknown = strip_unknown(migrate(data))
    return LoadResult(validate(data), [unknown_keys_warning(unknown)] if unknown else [])


def dataset_file_problem(data: dict[str, Any]) -> str | None:
    """Another trainer's dataset file given as the config: said, naming the file to give instead."""
    if "model" in data or "model_type" in data or "config" in data:
        return None
    if isinstance(data.get("directory"), list) and any(isinstance(d, dict) and "path" in d for d in data["directory"]):
        return ("this is diffusion-pipe's dataset file (its [[directory]] folders); import its main config, whose dataset = "
                "names this file (its folders are read from there)")
    return None  # (sd-scripts' and musubi-tuner's dataset TOML by itself imports its folders: kohya_import.py)


CLOUD_SECRET_KEYS = ("api_key", "huggingface_token")


def config_to_dict(config: TrainConfig, *, include_secrets: bool = False) -> dict[str, Any]:
    """The JSON form: every key, enum names as strings, infinity as "Infinity".

    Without the `secrets` section unless asked: tokens live in the workspace's secrets file
    (ot_gradio/secrets.py), never in configs, exports, run folders, backups or model metadata.
    OneTrainer's cloud section carries a key and a token of its own (`cloud.api_key`,
    `cloud.huggingface_token`): blanked too (cloud training is not something this trainer does)."""
    data = json.loads(config.model_dump_json())
    if not include_secrets:
        data.pop("secrets", None)
        cloud = data.get("cloud")
        if isinstance(cloud, dict):
            for key in CLOUD_SECRET_KEYS:
                if cloud.get(key):
                    cloud[key] = ""
    return data


def save_config(config: TrainConfig, path: str | Path) -> Path:
    """Write atomically: a crash mid-write leaves the old file, never a half-written one."""
    data = config_to_dict(config)
    data["config_version"] = CONFIG_VERSION
    return atomic_write_json(path, data, indent=2, ensure_ascii=False)


# --- --set overrides -------------------------------------------------------------------------

def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` items (``concepts.0.path=...`` or ``concepts[0].path=...``) to a
    copy of ``data``. Values are JSON when they parse (numbers, true, null, lists), else text;
    text fields always take the text as written. Unknown paths raise ConfigError."""
    data = deepcopy(data)
    errors: list[str] = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = re.sub(r"\[(\d+)\]", r".\1", key.strip())
        if not sep or not key:
            errors.append(f"--set {item}: use KEY.PATH=VALUE, e.g. epochs=5 or concepts.0.path=data/cats")
            continue
        parts = [int(p) if p.isdigit() else p for p in key.split(".")]
        try:
            annotation = _annotation_for(parts, item)
            _set(data, parts, _parse_value(raw, annotation), item)
        except ConfigError as err:
            errors += err.errors
    if errors:
        raise ConfigError(errors)
    return data


def _annotation_for(parts: list[str | int], item: str) -> Any:
    current: Any = TrainConfig
    for depth, part in enumerate(parts):
        where = ".".join(str(p) for p in parts[: depth + 1])
        node = strip_optional(current)
        if isinstance(node, type) and issubclass(node, BaseModel):
            if not isinstance(part, str) or part not in node.model_fields:
                raise ConfigError(f"--set {item}: {where} is not an option")
            current = node.model_fields[part].annotation
            continue
        kind, cls = nested_section(node)
        origin, args = typing.get_origin(node), typing.get_args(node)
        if origin is list:
            if not isinstance(part, int):
                raise ConfigError(f"--set {item}: {where} must be a list index (a number)")
            current = cls if kind == "list" else (args[0] if args else Any)
        elif origin is dict:
            current = cls if kind == "dict" else (args[1] if len(args) == 2 else Any)
        else:
            raise ConfigError(f"--set {item}: {'.'.join(str(p) for p in parts[:depth])} is a single value, it has no {part}")
    return current


def _parse_value(raw: str, annotation: Any) -> Any:
    nullable = strip_optional(annotation) is not annotation
    if strip_optional(annotation) is str:
        return None if nullable and raw == "null" else raw
    try:
        return jsontext.loads(raw)
    except ValueError:  # not JSON, nested too deeply, a number too long: the text as given (validation names it)
        return raw


def _set(data: dict[str, Any], parts: list[str | int], value: Any, item: str) -> None:
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        nxt = parts[depth + 1] if not last else None
        empty: Any = [] if isinstance(nxt, int) else {}
        where = ".".join(str(p) for p in parts[: depth + 1])
        if isinstance(part, int):
            if part > len(node):
                raise ConfigError(f"--set {item}: {where} does not exist (there are {len(node)} items; use index {len(node)} to add one)")
            if part == len(node):
                node.append(value if last else empty)
            elif last:
                node[part] = value
            if not last:
                if node[part] is None:
                    node[part] = empty
                node = node[part]
            continue
        if last:
            node[part] = value
        else:
            if not isinstance(node.get(part), (dict, list)):
                node[part] = empty
            node = node[part]
