"""Diffusers SD 1.x / 2.x weights -> the original single-file checkpoint layout.

The original (CompVis / Stability "ldm") layout is what A1111, Forge, ComfyUI and diffusers'
`from_single_file` read: `model.diffusion_model.*` for the UNet, `first_stage_model.*` for the VAE,
`cond_stage_model.transformer.text_model.*` for SD 1.x's CLIP text encoder and
`cond_stage_model.model.*` for SD 2.x's OpenCLIP one. Diffusers only converts the other way, so
this module does this direction. Block numbering is derived from each model's config and from
which sub-modules its state dict holds, so other widths and depths convert too. Any key the
mapping does not know raises, so a conversion never silently drops weights.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType
from ot_gradio.models.common import cast_state_dict, float_state_dict, torch_dtype
from ot_gradio.models.key_layout import save_tensors

UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."
CLIP_PREFIX = "cond_stage_model.transformer.text_model."
OPEN_CLIP_PREFIX = "cond_stage_model.model."

_UNET_RESNET = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "time_emb_proj": "emb_layers.1",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
    "conv_shortcut": "skip_connection",
}
_VAE_ATTENTION = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def _cfg(config: Mapping | object, name: str, default=None):
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def _has_prefix(keys, prefix: str) -> bool:
    return any(k.startswith(prefix) for k in keys)


def rename_by_prefix(state_dict: Mapping[str, torch.Tensor], prefixes: list[tuple[str, str, dict]]) -> dict:
    """Each key gets the original prefix of its longest matching diffusers prefix, and the first
    part of its remainder renamed through that prefix's table."""
    ordered = sorted(prefixes, key=lambda p: len(p[0]), reverse=True)
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        for new_prefix, old_prefix, renames in ordered:
            if key.startswith(new_prefix):
                rest = key[len(new_prefix):]
                for a, b in renames.items():
                    if rest.startswith(a + "."):
                        rest = b + rest[len(a):]
                        break
                out[old_prefix + rest] = value
                break
        else:
            raise ValueError(f"No original-layout name known for the weight '{key}'.")
    return out


def _per_block(value, count: int) -> list[int]:
    return list(value) if isinstance(value, (list, tuple)) else [int(value)] * count


def unet_prefix_map(config: Mapping | object, keys) -> list[tuple[str, str, dict]]:
    """(diffusers prefix, original prefix, rename table) for every block of a UNet2DConditionModel.

    Counts come from the config (number of down blocks, layers per block); optional parts
    (attentions, down/up samplers, the mid attention) from which prefixes the state dict holds.
    """
    keys = list(keys)
    n = len(_cfg(config, "down_block_types"))
    layers = _per_block(_cfg(config, "layers_per_block"), n)
    pairs: list[tuple[str, str, dict]] = [
        ("time_embedding.linear_1.", "time_embed.0.", {}),
        ("time_embedding.linear_2.", "time_embed.2.", {}),
        ("class_embedding.linear_1.", "label_emb.0.0.", {}),
        ("class_embedding.linear_2.", "label_emb.0.2.", {}),
        ("add_embedding.linear_1.", "label_emb.0.0.", {}),
        ("add_embedding.linear_2.", "label_emb.0.2.", {}),
        ("conv_in.", "input_blocks.0.0.", {}),
        ("conv_norm_out.", "out.0.", {}),
        ("conv_out.", "out.2.", {}),
    ]

    index = 1
    for b in range(n):
        for j in range(layers[b]):
            pairs.append((f"down_blocks.{b}.resnets.{j}.", f"input_blocks.{index}.0.", _UNET_RESNET))
            pairs.append((f"down_blocks.{b}.attentions.{j}.", f"input_blocks.{index}.1.", {}))
            index += 1
        if _has_prefix(keys, f"down_blocks.{b}.downsamplers.0."):
            pairs.append((f"down_blocks.{b}.downsamplers.0.conv.", f"input_blocks.{index}.0.op.", {}))
            index += 1

    if _has_prefix(keys, "mid_block.attentions.0."):
        pairs += [
            ("mid_block.resnets.0.", "middle_block.0.", _UNET_RESNET),
            ("mid_block.attentions.0.", "middle_block.1.", {}),
            ("mid_block.resnets.1.", "middle_block.2.", _UNET_RESNET),
        ]
    else:
        pairs += [
            ("mid_block.resnets.0.", "middle_block.0.", _UNET_RESNET),
            ("mid_block.resnets.1.", "middle_block.1.", _UNET_RESNET),
        ]

    index = 0
    for b, up_layers in enumerate(reversed(layers)):
        has_attention = _has_prefix(keys, f"up_blocks.{b}.attentions.")
        for j in range(up_layers + 1):
            pairs.append((f"up_blocks.{b}.resnets.{j}.", f"output_blocks.{index}.0.", _UNET_RESNET))
            pairs.append((f"up_blocks.{b}.attentions.{j}.", f"output_blocks.{index}.1.", {}))
            index += 1
        if _has_prefix(keys, f"up_blocks.{b}.upsamplers.0."):
            slot = 2 if has_attention else 1
            pairs.append((f"up_blocks.{b}.upsamplers.0.", f"output_blocks.{index - 1}.{slot}.", {}))
    return pairs


def unet_to_original(state_dict: Mapping[str, torch.Tensor], config: Mapping | object) -> dict[str, torch.Tensor]:
    """UNet2DConditionModel weights -> original names (without the `model.diffusion_model.` prefix)."""
    return rename_by_prefix(state_dict, unet_prefix_map(config, state_dict.keys()))


def vae_to_original(state_dict: Mapping[str, torch.Tensor], config: Mapping | object) -> dict[str, torch.Tensor]:
    """AutoencoderKL weights -> original names (without `first_stage_model.`).

    The original mid-block attention uses 1x1 convolutions where diffusers uses linear layers, so
    those weights gain two trailing unit dimensions. The decoder's up blocks count the other way.
    """
    n = len(_cfg(config, "block_out_channels"))
    pairs: list[tuple[str, str, dict]] = [
        ("quant_conv.", "quant_conv.", {}),
        ("post_quant_conv.", "post_quant_conv.", {}),
    ]
    for part in ("encoder", "decoder"):
        pairs += [
            (f"{part}.conv_in.", f"{part}.conv_in.", {}),
            (f"{part}.conv_out.", f"{part}.conv_out.", {}),
            (f"{part}.conv_norm_out.", f"{part}.norm_out.", {}),
            (f"{part}.mid_block.resnets.0.", f"{part}.mid.block_1.", {}),
            (f"{part}.mid_block.resnets.1.", f"{part}.mid.block_2.", {}),
            (f"{part}.mid_block.attentions.0.", f"{part}.mid.attn_1.", _VAE_ATTENTION),
        ]
    for i in range(n):
        pairs.append((f"encoder.down_blocks.{i}.resnets.", f"encoder.down.{i}.block.", {}))
        pairs.append((f"encoder.down_blocks.{i}.downsamplers.0.", f"encoder.down.{i}.downsample.", {}))
        pairs.append((f"decoder.up_blocks.{i}.resnets.", f"decoder.up.{n - 1 - i}.block.", {}))
        pairs.append((f"decoder.up_blocks.{i}.upsamplers.0.", f"decoder.up.{n - 1 - i}.upsample.", {}))
    out = rename_by_prefix(state_dict, pairs)
    result: dict[str, torch.Tensor] = {}
    for key, value in out.items():
        # resnets inside down/up blocks carry their index first: "block.0.conv_shortcut" -> nin_shortcut
        key = key.replace(".conv_shortcut.", ".nin_shortcut.")
        if ".mid.attn_1." in key and key.endswith(".weight") and value.ndim == 2:
            value = value[:, :, None, None]
        result[key] = value
    return result


def _strip_text_model(key: str) -> str:
    # transformers >= 5.6 flattened CLIPTextModel (no `text_model.` level); older versions and
    # CLIPTextModelWithProjection still have it.
    return key.removeprefix("text_model.")


def clip_to_original(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CLIPTextModel (OpenAI CLIP, SD 1.x) weights -> names under `cond_stage_model.transformer.text_model.`."""
    out = {}
    for key, value in state_dict.items():
        key = _strip_text_model(key)
        if key.endswith("position_ids") or key.startswith("text_projection"):
            continue
        out[key] = value
    return out


_OPEN_CLIP_LAYER = {
    "layer_norm1.": "ln_1.",
    "layer_norm2.": "ln_2.",
    "mlp.fc1.": "mlp.c_fc.",
    "mlp.fc2.": "mlp.c_proj.",
    "self_attn.out_proj.": "attn.out_proj.",
}


def open_clip_to_original(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CLIPTextModel holding SD 2.x's OpenCLIP ViT-H weights -> names under `cond_stage_model.model.`.

    q/k/v projections are stacked into one `in_proj` (torch MultiheadAttention). SD 2.x in
    diffusers keeps only the 23 layers it uses (penultimate-layer conditioning), so the 24th layer
    and the unused text projection of the original are absent, which the readers accept.
    """
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        key = _strip_text_model(key)
        if key.endswith("position_ids"):
            continue
        if key == "embeddings.token_embedding.weight":
            out["token_embedding.weight"] = value
        elif key == "embeddings.position_embedding.weight":
            out["positional_embedding"] = value
        elif key.startswith("final_layer_norm."):
            out["ln_final." + key.removeprefix("final_layer_norm.")] = value
        elif key.startswith("encoder.layers."):
            layer, rest = key.removeprefix("encoder.layers.").split(".", 1)
            base = f"transformer.resblocks.{layer}."
            if rest.startswith("self_attn.") and rest.split(".")[1] in ("q_proj", "k_proj", "v_proj"):
                _, proj, kind = rest.split(".")
                qkv.setdefault((base, kind), {})[proj[0]] = value
                continue
            for a, b in _OPEN_CLIP_LAYER.items():
                if rest.startswith(a):
                    out[base + b + rest[len(a):]] = value
                    break
            else:
                raise ValueError(f"No original-layout name known for the weight '{key}'.")
        else:
            raise ValueError(f"No original-layout name known for the weight '{key}'.")
    for (base, kind), parts in qkv.items():
        out[f"{base}attn.in_proj_{kind}"] = torch.cat([parts["q"], parts["k"], parts["v"]], dim=0)
    return out


def is_open_clip(text_encoder_config: Mapping | object) -> bool:
    """SD 2.x's OpenCLIP encoder uses plain gelu; OpenAI's CLIP (SD 1.x) uses quick_gelu."""
    return _cfg(text_encoder_config, "hidden_act") == "gelu"


def original_checkpoint(unet: torch.nn.Module, vae: torch.nn.Module, text_encoders, dtype: DataType | torch.dtype | None):
    """The UNet and the VAE under their single-file prefixes (shared by SD 1/2 and SDXL), then
    each text encoder's original-layout weights under its prefix (`text_encoders`: prefix ->
    a function giving them), float tensors cast to `dtype`."""
    dt = None if dtype is None else torch_dtype(dtype)
    result = {UNET_PREFIX + k: v for k, v in unet_to_original(float_state_dict(unet), unet.config).items()}
    result.update({VAE_PREFIX + k: v for k, v in vae_to_original(float_state_dict(vae), vae.config).items()})
    for prefix, weights in text_encoders.items():
        result.update({prefix + k: v for k, v in weights().items()})
    return cast_state_dict(result, dt)


def to_original_state_dict(unet: torch.nn.Module, vae: torch.nn.Module, text_encoder: torch.nn.Module,
                           dtype: DataType | torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The whole model as one original-layout state dict, float tensors cast to `dtype`."""
    if is_open_clip(text_encoder.config):
        text = {OPEN_CLIP_PREFIX: lambda: open_clip_to_original(float_state_dict(text_encoder))}
    else:
        text = {CLIP_PREFIX: lambda: clip_to_original(float_state_dict(text_encoder))}
    return original_checkpoint(unet, vae, text, dtype)


def save_original_single_file(path: str | os.PathLike, unet: torch.nn.Module, vae: torch.nn.Module, text_encoder: torch.nn.Module,
                              dtype: DataType | torch.dtype | None = None, metadata: Mapping[str, str] | None = None) -> Path:
    """Write an original-layout `.safetensors` checkpoint atomically."""
    return save_tensors(path, to_original_state_dict(unet, vae, text_encoder, dtype), metadata or {})
