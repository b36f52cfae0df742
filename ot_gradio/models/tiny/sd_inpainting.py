"""Tiny random SD 1.5 and SD 2 inpainting models: the same parts with a 9-channel UNet."""

from __future__ import annotations

import os

import torch

from ot_gradio.models.sd_inpainting import InpaintingMixin
from ot_gradio.models.tiny import TinyModelPaths, register_tiny
from ot_gradio.models.tiny.sd15 import save_unet_pipeline, tiny_sd2_components, tiny_sd15_components


def tiny_inpainting_pipeline(components: dict, seed: int = 0):
    """The pipeline of `components` with its UNet widened to 9 input channels."""
    from diffusers import StableDiffusionInpaintPipeline, UNet2DConditionModel

    config = {k: v for k, v in components["unet"].config.items() if not k.startswith("_")}
    config["in_channels"] = InpaintingMixin.unet_in_channels
    torch.manual_seed(seed)
    components = {**components, "unet": UNet2DConditionModel.from_config(config)}
    return StableDiffusionInpaintPipeline(**components, safety_checker=None, feature_extractor=None, requires_safety_checker=False)


@register_tiny("sd15-inpainting", 1)
def save_tiny_sd15_inpainting(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    return save_unet_pipeline(root, "sd15-inpainting", lambda: tiny_inpainting_pipeline(tiny_sd15_components(seed), seed))


@register_tiny("sd2-inpainting", 1)
def save_tiny_sd2_inpainting(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """SD 2.0 inpainting predicts epsilon at 512 px, like SD 2 base."""

    def build():
        components = tiny_sd2_components(seed)
        components["scheduler"].register_to_config(prediction_type="epsilon")
        return tiny_inpainting_pipeline(components, seed)

    return save_unet_pipeline(root, "sd2-inpainting", build)
