"""Tiny random SD 2.0 depth: the tiny SD 2 parts with a 5-channel UNet and a tiny DPT depth estimator."""

from __future__ import annotations

import os

import torch

from ot_gradio.models.sd2_depth import StableDiffusion20Depth
from ot_gradio.models.tiny import TinyModelPaths, register_tiny
from ot_gradio.models.tiny.sd15 import save_unet_pipeline, tiny_sd2_components


def tiny_depth_estimator(seed: int = 0):
    """A DPT depth estimator (4 ViT layers of width 16 on 32 px inputs) and its feature extractor."""
    from transformers import DPTConfig, DPTForDepthEstimation, DPTImageProcessor

    config = DPTConfig(hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32, image_size=32, patch_size=8,
                       backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 8, 8, 8], fusion_hidden_size=8,
                       reassemble_factors=[4, 2, 1, 0.5])
    torch.manual_seed(seed)
    return DPTForDepthEstimation(config), DPTImageProcessor(size={"height": 32, "width": 32}, keep_aspect_ratio=False)


@register_tiny("sd2-depth", 1)
def save_tiny_sd2_depth(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """SD 2.0 depth predicts epsilon at 512 px, like SD 2 base."""
    from diffusers import StableDiffusionDepth2ImgPipeline, UNet2DConditionModel

    def build():
        components = tiny_sd2_components(seed)
        components["scheduler"].register_to_config(prediction_type="epsilon")
        config = {k: v for k, v in components["unet"].config.items() if not k.startswith("_")}
        config["in_channels"] = StableDiffusion20Depth.unet_in_channels
        torch.manual_seed(seed)
        estimator, extractor = tiny_depth_estimator(seed)
        return StableDiffusionDepth2ImgPipeline(**{**components, "unet": UNet2DConditionModel.from_config(config)},
                                                depth_estimator=estimator, feature_extractor=extractor)

    return save_unet_pipeline(root, "sd2-depth", build)
