"""Civitai addresses a base model (or a part's own model) takes, as a user copies them: a model's
page (https://civitai.com/models/<id>[/<slug>][?modelVersionId=<version>]), a version's download
link (https://civitai.com/api/download/models/<version>[?type=..&format=..&size=..&fp=..]) or
its AIR (urn:air:sdxl:checkpoint:civitai:<id>@<version>). The trainer downloads the file once
(models/civitai_download.py). Torch-free: the start checks read it in the page's process.

Civitai tags each version with the model it was trained from ("SD 1.5", "SDXL 1.0", "Pony",
"Illustrious", "Flux.1 D"...): `base_model_mismatch` names a version that cannot be the model
type chosen, before gigabytes of it are downloaded."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

EXAMPLE = "https://civitai.com/models/<id>?modelVersionId=<version>"
_HOSTS = ("civitai.com", "www.civitai.com", "civitai.green", "www.civitai.green")
_AIR = re.compile(r"urn:air:[\w.-]+:[\w.-]+:civitai:(\d+)@(\d+)(?:\.[\w]+)?", re.IGNORECASE)
# the download link's file choice (Civitai's own query keys); anything else in the query is ignored
FILE_KEYS = ("type", "format", "size", "fp")


@dataclass(frozen=True)
class CivitaiAddress:
    model_id: int | None  # a model's page; None for a download link (it names the version only)
    version_id: int | None  # None: the model's newest version
    choice: dict[str, str] = field(default_factory=dict)  # the download link's type/format/size/fp
    token_in_address: bool = False  # a download link carrying ?token=: refused (it would be saved in configs)

    def __str__(self) -> str:
        if self.version_id is None:
            return f"Civitai model {self.model_id} (newest version)"
        return f"Civitai model version {self.version_id}"


def civitai_address(value: str) -> CivitaiAddress | None:
    """The Civitai model or version `value` names, None when it is no Civitai address."""
    text = str(value or "").strip()
    if air := _AIR.fullmatch(text):
        return CivitaiAddress(int(air[1]), int(air[2]))
    if not text.lower().startswith(("http://", "https://")):
        return None
    parts = urlsplit(text)
    if (parts.hostname or "").lower() not in _HOSTS:
        return None
    query = {k.lower(): v[-1] for k, v in parse_qs(parts.query).items() if v}
    token = "token" in query
    path = [p for p in parts.path.split("/") if p]
    version = query.get("modelversionid")
    if len(path) >= 2 and path[0] == "models" and path[1].isdigit():  # /models/<id>[/<slug>]
        if version is not None and not version.isdigit():
            return None
        return CivitaiAddress(int(path[1]), int(version) if version else None, token_in_address=token)
    if len(path) == 4 and path[:3] == ["api", "download", "models"] and path[3].isdigit():
        choice = {k: query[k] for k in FILE_KEYS if query.get(k)}
        return CivitaiAddress(None, int(path[3]), choice, token)
    if len(path) == 4 and path[:3] == ["api", "v1", "model-versions"] and path[3].isdigit():
        return CivitaiAddress(None, int(path[3]), token_in_address=token)
    return None


def is_civitai(value: str) -> bool:
    """`value` points at Civitai: a web address of its site or an AIR of it (a model address or not)."""
    text = str(value or "").strip()
    if _AIR.fullmatch(text):
        return True
    return text.lower().startswith(("http://", "https://")) and (urlsplit(text).hostname or "").lower() in _HOSTS


def redacted(value: str) -> str:
    """`value` with an API key in its query hidden, to be shown or logged."""
    return re.sub(r"(?i)(token=)[^&#]*", r"\1…", str(value or ""))


def address_problem(value: str) -> str | None:
    """What is wrong with a Civitai web address as a model name (None: it downloads)."""
    address = civitai_address(value)
    if address is None:
        return (f"is a Civitai address of no model version; copy the model's page address ({EXAMPLE}) or its "
                "download link")
    if address.token_in_address:
        return ("carries an API key (token=...) in the address, which would be saved in configs, backups and the "
                "model's metadata; remove it and give the key as General → Civitai API key")
    return None


# Civitai's base model tags -> the model types a checkpoint of it loads as. A tag not listed here is
# not judged (Civitai adds tags; a wrong one is named by the loader instead).
_SD15 = ("STABLE_DIFFUSION_15", "STABLE_DIFFUSION_15_INPAINTING")
_SD2 = ("STABLE_DIFFUSION_20", "STABLE_DIFFUSION_20_BASE", "STABLE_DIFFUSION_20_INPAINTING", "STABLE_DIFFUSION_20_DEPTH",
        "STABLE_DIFFUSION_21", "STABLE_DIFFUSION_21_BASE")
_SDXL = ("STABLE_DIFFUSION_XL_10_BASE", "STABLE_DIFFUSION_XL_10_BASE_INPAINTING")
_SD3 = ("STABLE_DIFFUSION_3", "STABLE_DIFFUSION_35")
_FLUX1 = ("FLUX_DEV_1", "FLUX_FILL_DEV_1")
BASE_MODEL_TYPES: dict[str, tuple[str, ...]] = {
    "sd 1.4": _SD15, "sd 1.5": _SD15, "sd 1.5 lcm": _SD15, "sd 1.5 hyper": _SD15,
    "sd 2.0": _SD2, "sd 2.0 768": _SD2, "sd 2.1": _SD2, "sd 2.1 768": _SD2,
    "sdxl 0.9": _SDXL, "sdxl 1.0": _SDXL, "sdxl turbo": _SDXL, "sdxl lightning": _SDXL, "sdxl hyper": _SDXL,
    "sdxl distilled": _SDXL, "pony": _SDXL, "illustrious": _SDXL, "noobai": _SDXL,
    "sd 3": _SD3, "sd 3.5": _SD3, "sd 3.5 medium": _SD3, "sd 3.5 large": _SD3, "sd 3.5 large turbo": _SD3,
    "flux.1 d": _FLUX1, "flux.1 s": _FLUX1, "flux.1 krea": _FLUX1,
}


def base_model_mismatch(base_model: str, model_type: str) -> str | None:
    """Why a version tagged `base_model` cannot load as `model_type` (None: it can, or the tag is unknown)."""
    types = BASE_MODEL_TYPES.get(str(base_model or "").strip().lower())
    if types is None or model_type in types:
        return None
    return (f"it is a {base_model} model, which loads as {' or '.join(types)}, not {model_type}; choose that model "
            "type or another model")
