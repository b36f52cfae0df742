"""What every saved model carries in its header, decided in one place for every output kind
(LoRA, embedding, fine-tune single file, diffusers folder).

- The training config only as `include_train_config` asks: NONE writes none, SETTINGS writes it
  without concepts, samples, cloud settings and with every absolute local path cut to its last
  name, ALL writes it whole. Secrets (the `secrets` section, the cloud API key and hub token) are
  never written, whatever the setting, and any secret value found in any other metadata value
  is blanked out.
- kohya's training keys with kohya's spellings and formats (`ss_sd_model_name`, `ss_resolution`
  as "(W, H)") and the hashes kohya precomputes for sd-webui-additional-networks
  (`sshs_model_hash`, `sshs_legacy_hash`).
- Stability AI's model spec (`modelspec.*`): architecture, implementation, title, resolution,
  date, prediction type and trigger phrase (the embeddings' placeholders).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import jsontext
from ..config.enums import ConfigPart
from ..config.io import config_to_dict
from ..config.resolution import parse_resolutions
from ..fsutil import atomic_write, atomic_write_text

CONFIG_KEY = "ot_gradio_config"
REDACTED = "<redacted>"
# Every field of the schema that holds a secret: the whole `secrets` section and the keys of
# OneTrainer's cloud settings that are credentials. Never in any file a run writes for sharing.
SECRET_SECTIONS = ("secrets",)
SECRET_CLOUD_KEYS = ("api_key", "huggingface_token", "password", "key_file")
# SETTINGS leaves out the data (concepts, samples) and the cloud box (host, user, folders).
NOT_IN_SETTINGS = ("concepts", "samples", "cloud")

SAI_MODEL_SPEC = "1.0.0"
IMPL_STABILITY = "https://github.com/Stability-AI/generative-models"
IMPL_DIFFUSERS = "diffusers"
ADAPTER = {"lora": "/lora", "embedding": "/textual-inversion", "checkpoint": ""}
DEFAULT_TITLE = {"lora": "LoRA", "embedding": "TextualInversion", "checkpoint": "Checkpoint"}
# architectures of the families that do not declare `modelspec_architecture`
ARCHITECTURES = {
    "PIXART_ALPHA": "pixart-alpha",
    "STABLE_CASCADE_1": "stable-cascade-v1-prior",
    "WUERSTCHEN_2": "wuerstchen-v2-prior",
}
_WINDOWS_ABS = re.compile(r"^[A-Za-z]:[\\/]|^\\\\")


# --- secrets ---------------------------------------------------------------------------------


def secret_values(config: Any) -> list[str]:
    """The non-empty secret strings of `config` (longest first), to blank out wherever they appear."""
    data = config_to_dict(config, include_secrets=True)
    found: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, str):
            if len(value.strip()) >= 4:
                found.append(value)
        elif isinstance(value, Mapping):
            for v in value.values():
                collect(v)
        elif isinstance(value, list):
            for v in value:
                collect(v)

    for section in SECRET_SECTIONS:
        collect(data.get(section))
    cloud = data.get("cloud") or {}
    for key in SECRET_CLOUD_KEYS:
        collect(cloud.get(key))
    return sorted(set(found), key=len, reverse=True)


def without_secrets(data: dict[str, Any]) -> dict[str, Any]:
    for section in SECRET_SECTIONS:
        data.pop(section, None)
    cloud = data.get("cloud")
    if isinstance(cloud, dict):
        for key in SECRET_CLOUD_KEYS:
            cloud.pop(key, None)
    return data


def scrub(metadata: Mapping[str, str], config: Any) -> dict[str, str]:
    """`metadata` with every secret value of `config` blanked out of keys' values."""
    secrets = secret_values(config)
    out = {}
    for key, value in metadata.items():
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        out[key] = value
    return out


# --- the embedded config -------------------------------------------------------------------------


def is_local_path(value: str) -> bool:
    return value.startswith(("/", "~")) or bool(_WINDOWS_ABS.match(value))


def _last_name(value: str) -> str:
    return re.split(r"[\\/]", value.rstrip("\\/"))[-1] or value


def _cut_paths(value: Any) -> Any:
    if isinstance(value, str):
        return _last_name(value) if is_local_path(value) else value
    if isinstance(value, dict):
        return {k: _cut_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_paths(v) for v in value]
    return value


def embedded_config(config: Any) -> dict[str, Any] | None:
    """The config to store in a saved model per `include_train_config`; None for NONE."""
    part = ConfigPart(config.include_train_config)
    if part == ConfigPart.NONE:
        return None
    data = without_secrets(config_to_dict(config))
    if part == ConfigPart.SETTINGS:
        for key in NOT_IN_SETTINGS:
            data.pop(key, None)
        data = _cut_paths(data)
    return data


def model_name(config: Any) -> str:
    """The base model as kohya's `ss_sd_model_name` names it: a local path by its last name, a hub id as it is."""
    name = str(config.base_model_name)
    return _last_name(name) if is_local_path(name) or os.path.exists(name) else name


# --- kohya + model spec keys -------------------------------------------------------------------


def largest_resolution(config: Any) -> tuple[int, int]:
    """(width, height) of the largest training resolution."""
    try:
        h, w = max(parse_resolutions(config.resolution), key=lambda hw: hw[0] * hw[1])
    except ValueError:
        return (512, 512)
    return (w, h)


def architecture(model: Any, kind: str) -> str:
    arch = model.modelspec_architecture
    if not arch:
        model_type = str(getattr(model.model_type, "value", model.model_type))
        arch = ARCHITECTURES.get(model_type, model_type.lower().replace("_", "-"))
    return arch + ADAPTER[kind]


def implementation(arch: str, kind: str, diffusers_layout: bool) -> str:
    """kohya's rule: Stability's code for SDXL LoRAs, textual inversions and original-layout
    checkpoints of the Stable Diffusion families; diffusers otherwise."""
    if not arch.startswith("stable-diffusion") or diffusers_layout:
        return IMPL_DIFFUSERS
    if kind == "embedding" or kind == "checkpoint" or arch.startswith("stable-diffusion-xl"):
        return IMPL_STABILITY
    return IMPL_DIFFUSERS


def model_metadata(
    config: Any,
    model: Any,
    *,
    kind: str,
    title: str | None = None,
    steps: int | None = None,
    epoch: int | None = None,
    trigger_phrases: Iterable[str] = (),
    diffusers_layout: bool = False,
) -> dict[str, str]:
    """The header of a saved model of `kind` ("lora", "embedding" or "checkpoint")."""
    w, h = largest_resolution(config)
    arch = architecture(model, kind)
    now = datetime.datetime.now().replace(microsecond=0)
    meta = {
        "ss_sd_model_name": model_name(config),
        "ss_base_model_name": str(config.base_model_name) if ConfigPart(config.include_train_config) == ConfigPart.ALL else model_name(config),
        "ss_resolution": f"({w}, {h})",
        "modelspec.sai_model_spec": SAI_MODEL_SPEC,
        "modelspec.architecture": arch,
        "modelspec.implementation": implementation(arch, kind, diffusers_layout),
        "modelspec.title": title or f"{DEFAULT_TITLE[kind]}@{now.isoformat()}",
        "modelspec.date": now.isoformat(),
        "modelspec.resolution": f"{w}x{h}",
    }
    if arch.startswith("stable-diffusion"):
        # the schedule it trained with: SD 2.x 768, a v_pred-marked SDXL file, or force_v_prediction
        v = getattr(model, "prediction_type", None) == "v_prediction" or str(model.lora_base_model_version).endswith("_v")
        meta["modelspec.prediction_type"] = "v" if v else "epsilon"
        if v:
            meta["ss_v_parameterization"] = "True"  # kohya's key (sd-scripts' --v_parameterization)
    phrases = [p for p in trigger_phrases if p]
    if phrases:
        meta["modelspec.trigger_phrase"] = ", ".join(phrases)
    if steps is not None:
        meta["ss_steps"] = str(int(steps))
    if epoch is not None:
        meta["ss_epoch"] = str(int(epoch))
    embedded = embedded_config(config)
    if embedded is not None:
        meta[CONFIG_KEY] = json.dumps(embedded)
    return scrub(meta, config)


# --- kohya's precomputed hashes ----------------------------------------------------------------


def addnet_hash(data: bytes) -> str:
    """sd-webui-additional-networks' hash: SHA-256 of a safetensors file's tensor data (after the header)."""
    (header_len,) = struct.unpack("<Q", data[:8])
    return hashlib.sha256(data[8 + header_len :]).hexdigest()


def addnet_legacy_hash(data: bytes) -> str:
    """Its old hash: the first 8 hex digits of SHA-256 of the 64 KiB at offset 1 MiB."""
    return hashlib.sha256(data[0x100000 : 0x100000 + 0x10000]).hexdigest()[:8]


def kohya_hashes(tensors: Mapping[str, Any], metadata: Mapping[str, str]) -> dict[str, str]:
    """`sshs_model_hash` / `sshs_legacy_hash` as kohya precomputes them: of the file the tensors
    make with only the `ss_*` metadata, so metadata users add later does not change them."""
    from safetensors.torch import save

    data = save(dict(tensors), metadata={k: v for k, v in metadata.items() if k.startswith("ss_")})
    return {"sshs_model_hash": addnet_hash(data), "sshs_legacy_hash": addnet_legacy_hash(data)}


# --- writing metadata into files already saved ---------------------------------------------------


def read_header(path: str | os.PathLike) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return jsontext.loads(f.read(n)), 8 + n


def add_safetensors_metadata(path: str | os.PathLike, metadata: Mapping[str, str]) -> Path:
    """Merge `metadata` into a saved `.safetensors` file's header (atomically; the tensor data is
    copied unchanged)."""
    header, data_start = read_header(path)
    header["__metadata__"] = {**header.get("__metadata__", {}), **{str(k): str(v) for k, v in metadata.items()}}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # keep the tensor data 8-byte aligned, as safetensors writes it

    def write(tmp: Path) -> None:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            dst.write(struct.pack("<Q", len(raw)) + raw)
            src.seek(data_start)
            shutil.copyfileobj(src, dst, 16 << 20)

    return atomic_write(path, write)


def add_folder_metadata(folder: str | os.PathLike, metadata: Mapping[str, str]) -> Path:
    """A diffusers folder's metadata: `_ot_gradio_metadata` in its model_index.json (diffusers
    ignores keys starting with `_` when it builds the pipeline); a folder without one gets
    `ot_gradio_metadata.json`."""
    index = Path(folder) / "model_index.json"
    if not index.is_file():
        return atomic_write_text(Path(folder) / "ot_gradio_metadata.json", json.dumps(dict(metadata), indent=2))
    data = jsontext.loads(index.read_text())
    data["_ot_gradio_metadata"] = dict(metadata)
    atomic_write_text(index, json.dumps(data, indent=2))
    return index

