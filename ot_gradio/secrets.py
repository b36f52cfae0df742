"""Tokens live in one file per workspace, `<workspace>/secrets.json`, readable by its owner only
(0600), and nowhere else: config files, exports, the page's autosave, run folders, backups,
model metadata and logs get the config without its `secrets` section (config_to_dict drops it).

The worker reads the token from here when a run starts; a config that arrives with a token in it
(a OneTrainer config, a hand-written file) has it moved here by `take_secrets`. The page stores the
token typed on it here (`store_config_token`, by its autosave) and its supervisor copies it into
the workspace of each run it starts elsewhere (`share_secrets`). Torch-free.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .fsutil import fsync_dir

SECRETS_FILE = "secrets.json"
SECRET_KEYS = ("huggingface_token", "civitai_token")


def secrets_path(workspace: str | os.PathLike) -> Path:
    return Path(workspace) / SECRETS_FILE


def read_secrets(workspace: str | os.PathLike) -> dict[str, str]:
    """The stored secrets ({} when there is no file). A file others can read is tightened to 0600."""
    path = secrets_path(workspace)
    if not path.is_file():
        return {}
    if os.name == "posix" and path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: str(v) for k, v in data.items() if k in SECRET_KEYS and isinstance(v, str)}


def write_secrets(workspace: str | os.PathLike, **values: str) -> Path:
    """Update the stored secrets (an empty value removes a key). The file is created 0600 before
    any byte is written and replaced atomically."""
    unknown = set(values) - set(SECRET_KEYS)
    if unknown:
        raise ValueError(f"Unknown secret(s) {sorted(unknown)}; known: {', '.join(SECRET_KEYS)}.")
    path = secrets_path(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = read_secrets(workspace)
    for key, value in values.items():
        if value:
            data[key] = value
        else:
            data.pop(key, None)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)
    return path


def take_secrets(config: dict[str, Any], workspace: str | os.PathLike) -> list[str]:
    """Move tokens found in a config dict into the workspace's secrets file and blank them in
    the dict. Returns a warning for each token moved."""
    secrets = config.get("secrets")
    if not isinstance(secrets, dict):
        return []
    moved = {k: secrets[k] for k in SECRET_KEYS if isinstance(secrets.get(k), str) and secrets[k]}
    if not moved:
        return []
    write_secrets(workspace, **moved)
    for key in moved:
        secrets[key] = ""
    return [
        f"secrets.{key}: moved from the config to {secrets_path(workspace)} (owner-only); it is never written "
        "into configs, exports, backups or models. Remove it from the file you loaded."
        for key in moved
    ]


def apply_secrets(config: Any, workspace: str | os.PathLike) -> None:
    """Fill a loaded TrainConfig's secrets from the workspace's file (a token already set wins)."""
    stored = read_secrets(workspace)
    for key in SECRET_KEYS:
        if stored.get(key) and not getattr(config.secrets, key):
            setattr(config.secrets, key, stored[key])


def store_config_token(config: dict[str, Any], workspace: str | os.PathLike) -> dict[str, Any]:
    """`config` (the page's) without its `secrets` section, whose tokens, when the section is there,
    become the workspace's stored ones ("" removes one): the page's autosave never writes them."""
    config = dict(config)
    section = config.pop("secrets", None)
    stored = read_secrets(workspace)
    changed = {key: token.strip() for key in SECRET_KEYS
               if isinstance(section, dict) and isinstance(token := section.get(key), str) and token.strip() != stored.get(key, "")}
    if changed:
        write_secrets(workspace, **changed)
    return config


def share_secrets(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """The tokens stored in workspace `source` (the page's) into workspace `target` (a run's
    elsewhere, whose worker reads its own file); a token `target` holds already is replaced."""
    stored = read_secrets(source)
    held = read_secrets(target)
    if Path(source).resolve() != Path(target).resolve() and any(held.get(key) != value for key, value in stored.items()):
        write_secrets(target, **stored)


def without_tokens(config: dict[str, Any]) -> dict[str, Any]:
    """`config` (the page's) with its token fields empty: what the page holds once a typed token
    (or the '-' that removes one) is stored, so no later save repeats it."""
    section = config.get("secrets")
    return {**config, "secrets": {**section, **dict.fromkeys(SECRET_KEYS, "")}} if isinstance(section, dict) else config
