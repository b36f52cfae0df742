"""Diffusers SDXL weights -> the original (Stability "sgm") single-file checkpoint layout.

What A1111, Forge, ComfyUI, kohya's sd-scripts and diffusers' `from_single_file` read:
`model.diffusion_model.*` for the UNet, `first_stage_model.*` for the VAE,
`conditioner.embedders.0.transformer.text_model.*` for CLIP ViT-L (transformers' own names) and
`conditioner.embedders.1.model.*` for OpenCLIP ViT-bigG (OpenCLIP's names, q/k/v fused). Diffusers
converts only the other way. The UNet and VAE use the same block layout as SD 1.x/2.x, so their
renames (and the OpenCLIP layer renames) come from `sd_single_file`; what SDXL adds is the second
embedder with its text projection, and the UNet's `label_emb` (diffusers' `add_embedding`), which
that module already maps.

The same UNet renames give the layer names of kohya SDXL LoRA files: sd-scripts trains SDXL on
the original UNet, so its LoRA layers are called `lora_unet_input_blocks_4_1_...`, not
`lora_unet_down_blocks_...` (`unet_module_names`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType
from ot_gradio.models.common import float_state_dict
from ot_gradio.models.key_layout import save_tensors
from ot_gradio.models.sd_single_file import (
    clip_to_original,
    open_clip_to_original,
    original_checkpoint,
    rename_by_prefix,
    unet_prefix_map,
)

CLIP_L_PREFIX = "conditioner.embedders.0.transformer.text_model."
OPEN_CLIP_G_PREFIX = "conditioner.embedders.1.model."


def open_clip_g_to_original(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CLIPTextModelWithProjection (OpenCLIP ViT-bigG) weights -> names under `conditioner.embedders.1.model.`.

    The layers convert as SD 2's OpenCLIP does. OpenCLIP applies its text projection as
    `x @ text_projection`, so the matrix it stores is the transpose of the Linear weight.
    """
    rest = dict(state_dict)
    projection = rest.pop("text_projection.weight", None)
    out = open_clip_to_original(rest)
    if projection is not None:
        out["text_projection"] = projection.t().contiguous()
    return out


def sdxl_to_original_state_dict(unet: torch.nn.Module, vae: torch.nn.Module, text_encoder: torch.nn.Module,
                                text_encoder_2: torch.nn.Module, dtype: DataType | torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The whole SDXL model as one original-layout state dict, float tensors cast to `dtype`."""
    text = {CLIP_L_PREFIX: lambda: clip_to_original(float_state_dict(text_encoder)),
            OPEN_CLIP_G_PREFIX: lambda: open_clip_g_to_original(float_state_dict(text_encoder_2))}
    return original_checkpoint(unet, vae, text, dtype)


def save_sdxl_single_file(path: str | os.PathLike, unet: torch.nn.Module, vae: torch.nn.Module, text_encoder: torch.nn.Module,
                          text_encoder_2: torch.nn.Module, dtype: DataType | torch.dtype | None = None,
                          metadata: Mapping[str, str] | None = None, markers: Mapping[str, torch.Tensor] | None = None) -> Path:
    """Write an original-layout SDXL `.safetensors` checkpoint atomically; `markers`: ComfyUI's
    schedule markers (models/schedule_markers.py) beside the weights."""
    state = sdxl_to_original_state_dict(unet, vae, text_encoder, text_encoder_2, dtype)
    return save_tensors(path, {**state, **(markers or {})}, metadata or {})


def unet_module_names(unet: torch.nn.Module) -> dict[str, str]:
    """Diffusers module path -> original module path for every UNet module with a weight,
    e.g. `down_blocks.1.attentions.0.proj_in` -> `input_blocks.4.1.proj_in`. Works on a UNet
    with peft LoRA layers in it too (their `base_layer` is the original module)."""
    keys = [k.replace(".base_layer.", ".") for k in unet.state_dict() if ".lora_" not in k]
    modules = {k.removesuffix(".weight") for k in keys if k.endswith(".weight")}
    renamed = rename_by_prefix({m + ".weight": m for m in modules}, unet_prefix_map(unet.config, keys))
    return {module: key.removesuffix(".weight") for key, module in renamed.items()}
