"""Hugging Face file addresses (https://huggingface.co/<owner>/<repo>/blob/<revision>/<file>),
which a base model and a part's own model name take for one file on the hub (a single-file
checkpoint; OneTrainer's DeTurbo presets give a transformer so), and repo page addresses, which a
base model takes for the repo's id. Torch-free: the start checks read it in the page's process."""

from __future__ import annotations

import re

_HUB_FILE_URL = re.compile(r"https?://(?:www\.)?huggingface\.co/([^/?#]+/[^/?#]+)/(?:blob|resolve)/([^/?#]+)/([^?#]+)")
EXAMPLE = "https://huggingface.co/<owner>/<repo>/blob/main/<file>"


def hub_file_address(value: str) -> tuple[str, str, str] | None:
    """(repo, revision, file) of a Hugging Face file address, None for anything else."""
    match = _HUB_FILE_URL.fullmatch(str(value or "").strip())
    return (match[1], match[2], match[3]) if match else None


_HUB_REPO_URL = re.compile(r"https?://(?:www\.)?huggingface\.co/([^/?#]+/[^/?#]+?)(?:/tree/main)?/?(?:[?#].*)?")


def hub_repo_address(value: str) -> str | None:
    """The hub id of a Hugging Face repo's page address (https://huggingface.co/<owner>/<repo>, as
    copied from the browser), None for anything else."""
    match = _HUB_REPO_URL.fullmatch(str(value or "").strip())
    return match[1] if match and not match[1].startswith(("api/", "datasets/", "spaces/")) else None


def is_web_address(value: str) -> bool:
    return str(value or "").strip().lower().startswith(("http://", "https://"))


def downloads_file(value: str) -> bool:
    """`value` is an address of one file that downloads: a Hugging Face file's, or a Civitai
    model's (a LoRA, an embedding: config/civitai.py)."""
    from .civitai import civitai_address  # noqa: PLC0415

    return hub_file_address(value) is not None or civitai_address(value) is not None


def downloads_model(value: str) -> bool:
    """`value` is an address of a model that downloads: a Hugging Face file or repo page address,
    or a Civitai model's (config/civitai.py)."""
    return downloads_file(value) or hub_repo_address(value) is not None
