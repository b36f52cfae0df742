"""The original (CompVis / Stability "ldm") model config written as `<stem>.yaml` beside an SD 1.x /
2.x single file, and read back from one.

OneTrainer writes such a file beside every SD 1.x/2.x checkpoint it saves (StableDiffusionModelSaver:
`<stem>.yaml`, its model's sd_config, with `model.params.parameterization: v` when the model trains
v-prediction) and reads `<stem>.yaml` / `<stem>.yml` beside a base model in place of its per-type
default (SDConfigModelLoaderMixin). A1111 builds its model from a yaml beside a checkpoint, so the
yaml is what says "v-prediction" there. The templates below are the keys of the well-known
inference configs (v1-inference.yaml, v1-inpainting-inference.yaml, v2-inference(-v).yaml,
v2-inpainting-inference.yaml, v2-midas-inference.yaml), less the training-only LR warm-up schedule.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_VAE = {
    "target": "ldm.models.autoencoder.AutoencoderKL",
    "params": {
        "embed_dim": 4,
        "monitor": "val/rec_loss",
        "ddconfig": {"double_z": True, "z_channels": 4, "resolution": 256, "in_channels": 3, "out_ch": 3, "ch": 128,
                     "ch_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_resolutions": [], "dropout": 0.0},
        "lossconfig": {"target": "torch.nn.Identity"},
    },
}
_UNET_COMMON = {"use_checkpoint": True, "image_size": 32, "in_channels": 4, "out_channels": 4, "model_channels": 320,
                "attention_resolutions": [4, 2, 1], "num_res_blocks": 2, "channel_mult": [1, 2, 4, 4],
                "use_spatial_transformer": True, "transformer_depth": 1, "legacy": False}
# SD 1.x: OpenAI CLIP ViT-L, 8 heads; SD 2.x: OpenCLIP ViT-H (penultimate layer), 64-channel heads, linear proj
_UNET = {
    1: {**_UNET_COMMON, "num_heads": 8, "context_dim": 768},
    2: {**_UNET_COMMON, "use_fp16": True, "num_head_channels": 64, "use_linear_in_transformer": True, "context_dim": 1024},
}
_TEXT = {
    1: {"target": "ldm.modules.encoders.modules.FrozenCLIPEmbedder"},
    2: {"target": "ldm.modules.encoders.modules.FrozenOpenCLIPEmbedder", "params": {"freeze": True, "layer": "penultimate"}},
}
# UNet input channels -> (the model's class, conditioning key, what else its params hold)
_KINDS = {
    4: ("ldm.models.diffusion.ddpm.LatentDiffusion", "crossattn", {}),
    9: ("ldm.models.diffusion.ddpm.LatentInpaintDiffusion", "hybrid", {"finetune_keys": None}),  # + masked image, mask
    5: ("ldm.models.diffusion.ddpm.LatentDepth2ImageDiffusion", "hybrid",  # + depth (SD 2 depth)
        {"finetune_keys": None, "depth_stage_config": {"target": "ldm.modules.midas.api.MiDaSInference",
                                                       "params": {"model_type": "dpt_hybrid"}}}),
}


def ldm_config(version: int, in_channels: int, prediction_type: str) -> dict[str, Any] | None:
    """The LDM config of an SD `version` (1 or 2) model whose UNet takes `in_channels` (4; 9:
    inpainting; 5: SD 2 depth) and predicts `prediction_type` ('epsilon' or 'v_prediction'); None
    for a UNet of another kind (no config is better than a wrong one)."""
    if in_channels not in _KINDS:
        return None
    target, conditioning_key, extra = _KINDS[in_channels]
    unet = {**_UNET[version], "in_channels": in_channels}
    if in_channels != 4:
        unet.pop("use_fp16", None)  # as v2-inpainting-inference.yaml and v2-midas-inference.yaml
    params: dict[str, Any] = {
        "parameterization": "v" if prediction_type == "v_prediction" else "eps",  # ldm's names
        "linear_start": 0.00085,
        "linear_end": 0.0120,
        "num_timesteps_cond": 1,
        "log_every_t": 200,
        "timesteps": 1000,
        "first_stage_key": "jpg",
        "cond_stage_key": "txt",
        "image_size": 64,
        "channels": 4,
        "cond_stage_trainable": False,
        "conditioning_key": conditioning_key,
        "monitor": "val/loss_simple_ema",
        "scale_factor": 0.18215,
        "use_ema": False,
        **copy.deepcopy(extra),
        "unet_config": {"target": "ldm.modules.diffusionmodules.openaimodel.UNetModel",
                        "params": unet},
        "first_stage_config": copy.deepcopy(_VAE),
        "cond_stage_config": copy.deepcopy(_TEXT[version]),
    }
    return {"model": {"base_learning_rate": 1.0e-4, "target": target, "params": params}}


def sidecar_path(path: str | Path, suffix: str = ".yaml") -> Path:
    """`<stem>.yaml` beside the checkpoint `path`."""
    return Path(path).with_suffix(suffix)


def write_ldm_config(path: str | Path, config: Mapping[str, Any]) -> Path:
    """`config` as `<stem>.yaml` beside the checkpoint `path`, written atomically."""
    import yaml  # noqa: PLC0415

    from ot_gradio.fsutil import atomic_write_text  # noqa: PLC0415

    text = yaml.safe_dump(dict(config), default_flow_style=False, sort_keys=False, allow_unicode=True)
    return atomic_write_text(sidecar_path(path), text)


def read_parameterization(path: str | Path) -> str | None:
    """What the yaml beside the checkpoint `path` (`<stem>.yaml`, else `<stem>.yml`, as OneTrainer
    looks) says the model predicts: 'v_prediction', 'epsilon', or None (no yaml, an unreadable one,
    or one that does not say). An SDXL ("sgm") config says v through its denoiser's VScaling."""
    import yaml  # noqa: PLC0415

    for suffix in (".yaml", ".yml"):
        yaml_path = sidecar_path(path, suffix)
        if yaml_path.is_file():
            break
    else:
        return None
    try:
        params = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))["model"]["params"]
        value = str(params.get("parameterization") or "").strip().lower()
    except Exception:  # noqa: BLE001 (a yaml we cannot read says nothing; the checkpoint still loads)
        return None
    if value == "v":
        return "v_prediction"
    if value in ("eps", "epsilon"):  # OneTrainer's force_epsilon_prediction writes "epsilon"
        return "epsilon"
    try:
        scaling = str(params["denoiser_config"]["params"]["scaling_config"]["target"])
    except Exception:  # noqa: BLE001
        return None
    return "v_prediction" if scaling.endswith(".VScaling") else None
