"""The files a run starts from beside its base model: the LoRA it continues (`lora_model_name`)
and the embeddings it continues or uses (EMBEDDING's `embedding.model_name`, every method's
`additional_embeddings`). Each is a file here, or a Hugging Face file's or Civitai's address that
downloads once into the hub cache (models/common.part_file). The trainer fetches them in its
download watch, on the main process first (`fetch_start_files`); the method's setup then takes
the file found there, without asking the site again. The config keeps the address, so a saved
config or backup stays what the user wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.enums import TrainingMethod
from ..models.common import ModelLoadError, part_file

_FOUND: dict[tuple[str, str, str, bool, str], Path] = {}  # (value, kind, cache, offline, model type) -> its file


def run_file(config: Any, value: str, field: str, kind: str) -> Path:
    """The local file of `value` (a file, or an address downloaded once in this process) for the
    config's `field`, of `kind` "lora" or "embedding"; a ValueError naming the field when it is none."""
    key = (str(value or "").strip(), kind, config.huggingface_cache_dir or "", bool(config.offline_mode), config.model_type.value)
    if (found := _FOUND.get(key)) is not None and found.is_file():
        return found
    try:
        found = part_file(key[0], field, cache_dir=key[2] or None, offline=key[3], token=config.secrets.huggingface_token or None,
                          model_type=key[4], kind=kind)
    except ModelLoadError as err:
        raise ValueError(str(err)) from None
    _FOUND[key] = found
    return found


def start_lora_file(config: Any) -> Path:
    """The local file of the LoRA a run starts from (`lora_model_name`)."""
    return run_file(config, config.lora_model_name, "lora_model_name", "lora")


def embedding_settings(config: Any, *, main: bool) -> list[tuple[str, Any]]:
    """(field, settings) of each embedding a method installs: with `main` the EMBEDDING method's
    own one first, then the additional embeddings."""
    return ([("embedding", config.embedding)] if main else []) + [
        (f"additional_embeddings[{i}]", e) for i, e in enumerate(config.additional_embeddings)]


def local_embedding(config: Any, settings: Any, field: str) -> Any:
    """`settings` with a local `model_name`: an address's downloaded file in its place (a blank
    or local one as it is)."""
    value = str(settings.model_name or "").strip()
    if not value or Path(value).expanduser().is_file():
        return settings
    return settings.model_copy(update={"model_name": str(run_file(config, value, f"{field}.model_name", "embedding"))})


def fetch_start_files(config: Any) -> None:
    """Download what the run starts from and has not yet (the LoRA it continues, the embeddings
    its method reads), so that it happens in the trainer's download watch with its progress."""
    method = TrainingMethod(config.training_method)
    if method == TrainingMethod.LORA and str(config.lora_model_name or "").strip():
        start_lora_file(config)
    if method in (TrainingMethod.LORA, TrainingMethod.FINE_TUNE, TrainingMethod.EMBEDDING):
        for field, settings in embedding_settings(config, main=method == TrainingMethod.EMBEDDING):
            local_embedding(config, settings, field)
