"""Where the models of Würstchen 2 and Stable Cascade come from: a hub repo or a local diffusers
folder, with the subfolder of each part (`owner/repo/prior_lite`, a component folder inside a
diffusers model), loaded with the run's hub settings so that a failure names the config field;
and the EffNet image encoder, from a diffusers-layout folder / repo or one .safetensors file."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.effnet import EfficientNetEncoder, load_effnet_state_dict
from ot_gradio.models.weight_variants import part_keywords

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(/[\w.-]+)?")


def _is_local(name: str) -> bool:
    return (
        Path(name).expanduser().exists()
        or name.startswith(("/", ".", "~", "\\"))
        or re.match(r"^[A-Za-z]:[\\/]", name) is not None
        or name.lower().endswith((".safetensors", ".ckpt", ".bin"))
    )


class Source:
    """Where one model comes from: a local folder or a hub repo, and the subfolder of the part.

    `owner/repo/sub` (hub) and a component folder inside a diffusers model (its parent has
    model_index.json) both name the subfolder explicitly, e.g. Stable Cascade's `prior_lite`."""

    def __init__(self, root: str, subfolder: str | None, local: bool):
        self.root, self.subfolder, self.local = root, subfolder, local

    def __repr__(self) -> str:
        return f"{self.root}" + (f" ({self.subfolder})" if self.subfolder else "")


def resolve_source(name: str, field: str, default_subfolder: str, example: str) -> Source:
    name = str(name or "").strip()
    if not name:
        raise ModelLoadError(f"{field}: no model given. Enter a Hugging Face id like '{example}' or a local diffusers folder.")
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "model_index.json").is_file():
            return Source(str(path), default_subfolder, True)
        if (path / "config.json").is_file() and (path.parent / "model_index.json").is_file():
            return Source(str(path.parent), path.name, True)
        raise ModelLoadError(
            f"{field}: the folder '{name}' is not a diffusers model (no model_index.json). "
            "Pick the folder that holds model_index.json."
        )
    if _is_local(name) or not _HUB_ID.fullmatch(name):
        raise ModelLoadError(f"{field}: '{name}' was not found (no such folder). Check the path, or give a hub id like '{example}'.")
    owner, repo, *sub = name.split("/")
    return Source(f"{owner}/{repo}", sub[0] if sub else default_subfolder, False)


class Loader:
    """from_pretrained with the run's hub settings, turning failures into messages that name the field."""

    def __init__(self, cache_dir: str | None, offline: bool, token: str | None):
        self.cache_dir, self.offline, self.token = cache_dir, offline, token

    def hint(self, source: Source) -> str:
        if source.local:
            return "check that the folder is a complete model of this family"
        if self.offline:
            return ("offline mode is on and it is not in the local Hugging Face cache"
                    + (f" ({self.cache_dir})" if self.cache_dir else "") + "; turn offline mode off to download it once")
        return "check the id, your network and, for gated models, the access token"

    def load(self, cls, source: Source, subfolder: str | None, field: str, **kwargs):
        try:
            return cls.from_pretrained(
                source.root,
                subfolder=subfolder,
                cache_dir=self.cache_dir,
                token=self.token,
                local_files_only=self.offline or source.local,
                **kwargs,
                **part_keywords(source.root, subfolder or "", {"cache_dir": self.cache_dir, "token": self.token,
                                                               "local_files_only": self.offline}),
            )
        except Exception as e:  # diffusers, transformers and the hub raise many kinds
            where = f"{source.root}" + (f"/{subfolder}" if subfolder else "")
            detail = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else type(e).__name__
            raise ModelLoadError(f"{field}: could not load {cls.__name__} from '{where}': {self.hint(source)} (Details: {detail}.)") from e

    def pipeline_config(self, pipeline_cls, source: Source, field: str) -> dict:
        try:
            return dict(pipeline_cls.load_config(
                source.root, cache_dir=self.cache_dir, token=self.token, local_files_only=self.offline or source.local
            ))
        except Exception as e:
            raise ModelLoadError(f"{field}: '{source.root}' has no readable model_index.json: {self.hint(source)} ({e}).") from e

    def hub_file(self, repo: str, filename: str, field: str) -> str:
        from huggingface_hub import hf_hub_download

        try:
            return hf_hub_download(repo, filename, cache_dir=self.cache_dir, token=self.token, local_files_only=self.offline)
        except Exception as e:
            raise ModelLoadError(
                f"{field}: could not get {filename} from '{repo}': {self.hint(Source(repo, None, False))}; "
                "or download it yourself and give its path."
            ) from e


# ------------------------------------------------------------------ the EffNet encoder


def _infer_effnet_config(state_dict: Mapping[str, torch.Tensor]) -> dict:
    """Widths and depths of an EfficientNetV2-S-shaped encoder from its weights (the published
    full-size files and tiny test ones alike)."""
    widths = [int(state_dict["backbone.0.0.weight"].shape[0])]
    depths = []
    for stage in range(1, 7):
        blocks = {int(k.split(".")[2]) for k in state_dict if k.startswith(f"backbone.{stage}.")}
        if not blocks:
            raise KeyError(f"backbone.{stage}")
        depths.append(len(blocks))
        layers = [int(k.split(".")[4]) for k in state_dict if re.match(rf"backbone\.{stage}\.0\.block\.\d+\.0\.weight$", k)]
        widths.append(int(state_dict[f"backbone.{stage}.0.block.{max(layers)}.0.weight"].shape[0]))
    return {
        "c_latent": int(state_dict["mapper.0.weight"].shape[0]),
        "c_cond": int(state_dict["mapper.0.weight"].shape[1]),
        "affine_batch_norm": "mapper.1.weight" in state_dict,
        "widths": widths,
        "depths": depths,
    }


def load_effnet_file(path: str | os.PathLike, field: str = "effnet_encoder.model_name") -> EfficientNetEncoder:
    """An EffNet encoder from one .safetensors file (Stable Cascade's `effnet_encoder.safetensors`)."""
    from safetensors.torch import load_file

    try:
        state_dict = load_file(str(path))
        config = _infer_effnet_config(state_dict)
    except KeyError as e:
        raise ModelLoadError(f"{field}: {path} is not an EfficientNet encoder file (no {e} weights).") from e
    except Exception as e:
        raise ModelLoadError(f"{field}: could not read {path} ({e}).") from e
    if config["widths"] == [24, 24, 48, 64, 128, 160, 256]:
        config.update(widths=None, depths=None)  # the real V2-S
    encoder = EfficientNetEncoder(**config)
    try:
        load_effnet_state_dict(encoder, state_dict, str(path))
    except ValueError as e:
        raise ModelLoadError(str(e)) from e
    return encoder.eval()


def load_effnet(name: str, loader: Loader, field: str = "effnet_encoder.model_name") -> EfficientNetEncoder:
    """A local .safetensors file, or a folder / hub repo in the diffusers layout (config.json and
    weights, as `warp-ai/EfficientNetEncoder`)."""
    path = Path(name).expanduser()
    if path.is_file():
        return load_effnet_file(path, field)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{field}: the folder '{name}' has no config.json; give the EffNet folder or its .safetensors file.")
        return loader.load(EfficientNetEncoder, Source(str(path), None, True), None, field).eval()
    if _is_local(name) or not _HUB_ID.fullmatch(name):
        raise ModelLoadError(f"{field}: '{name}' was not found; give the EffNet encoder's .safetensors file, folder or hub id.")
    return loader.load(EfficientNetEncoder, Source(name, None, False), None, field).eval()
