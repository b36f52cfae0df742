"""The captioning models' registry and what they share: `Captioner` (load once, caption lists of
images), the device choice, the hub's offline check and the message that says what to download.
The models: tools/autocaption.py (BLIP, BLIP-2, WD14) and tools/vlm_caption.py (JoyCaption,
Qwen2.5-VL). Torch-free at import: the page reads the registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .jobs import JobError

CAPTIONERS: dict[str, type[Captioner]] = {}


def register(name: str) -> Callable[[type[Captioner]], type[Captioner]]:
    def add(cls: type[Captioner]) -> type[Captioner]:
        CAPTIONERS[name] = cls
        return cls
    return add


class Captioner:
    """One captioning model: `load` once, then `caption` lists of RGB images."""

    label = ""
    default_path = ""
    download_hint = ""  # which files a local folder must hold

    def __init__(self, options: dict[str, Any]):
        self.options = options

    def load(self, path: str, device: str) -> None:
        raise NotImplementedError

    def caption(self, images: list[Any], initial: str, names: list[str] | None = None) -> list[str]:
        """One caption per image; `names` (the images' names in the folder) seed what samples."""
        raise NotImplementedError

    def device(self, device: str) -> str:
        """"auto" takes the GPU when torch sees one; "cuda" without a GPU is refused by name."""
        import torch  # noqa: PLC0415

        return pick_device(device, torch.cuda.is_available())


def pick_device(device: str, has_gpu: bool) -> str:
    device = (device or "auto").strip().lower()
    if device == "auto":
        return "cuda" if has_gpu else "cpu"
    if device != "cpu" and not device.startswith("cuda"):
        raise JobError(f"device: '{device}' is not one of auto, cpu, cuda")
    if device.startswith("cuda") and not has_gpu:
        raise JobError("device: 'cuda' was chosen but no GPU is usable here; choose 'cpu' or 'auto'")
    return device


def looks_local(path: str) -> bool:
    """A hub id is 'owner/name'; anything absolute, relative-looking or existing is a folder."""
    return Path(path).expanduser().exists() or path.startswith((".", "/", "~", "\\")) or "\\" in path or ":" in path or path.count("/") > 1


def hub_offline(timeout: float = 3.0) -> bool:
    """Whether the hub is to be read from its local cache only: offline mode is set (HF_HUB_OFFLINE),
    or the hub's host does not answer within `timeout` seconds. Without network the hub client
    retries every file for minutes before giving up; this way a missing model is named at once.
    Behind a proxy (HTTPS_PROXY) the host is not probed: the client goes through the proxy."""
    import os  # noqa: PLC0415
    import socket  # noqa: PLC0415
    from urllib.parse import urlparse  # noqa: PLC0415

    from huggingface_hub import constants  # noqa: PLC0415

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return True
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return False
    endpoint = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", endpoint.port or 443), timeout=timeout).close()
    except OSError:
        return True
    return False


def not_found(captioner: Captioner, path: str, err: BaseException | None = None) -> JobError:
    """The message for weights that cannot be loaded: what to download and where to give it."""
    if looks_local(path):
        problem = f"folder '{path}' does not exist" if not Path(path).expanduser().exists() else f"could not load '{path}'"
        hub, target = captioner.default_path, f"'{path}'"
    else:
        problem = f"could not load '{path}' from the Hugging Face hub (offline, or no such model)"
        hub, target = path, "<folder>"
    why = f" ({type(err).__name__}: {str(err).strip().splitlines()[0][:300]})" if err is not None and str(err).strip() else ""
    return JobError(
        f"{captioner.label}: {problem}{why}. Download it on a machine with internet with "
        f"`hf download {hub} {captioner.download_hint}--local-dir {target}` (pip install huggingface_hub), "
        f"copy the folder here and give that folder in Model path."
    )


def option(options: dict[str, Any], key: str, default: float) -> float:
    """A number from the params; 0 is a value, only None/"" take the default."""
    value = options.get(key)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        raise JobError(f"{key}: '{value}' is not a number") from None


def weights_source(captioner: Captioner, path: str) -> tuple[str, dict[str, Any]]:
    """Where a transformers model loads from: a local folder (which must exist), or a hub id read
    from the local cache only when the hub is offline; and the keywords that say so."""
    local = Path(path).expanduser()
    if looks_local(path) and not local.is_dir():
        raise not_found(captioner, path)
    return (str(local), {}) if local.is_dir() else (path, {"local_files_only": hub_offline()})
