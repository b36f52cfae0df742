"""Tiny random Stable Diffusion 2 (`tiny:sd2` with v-prediction, `tiny:sd2-base` with epsilon)."""

from __future__ import annotations

import os

from ot_gradio.models.tiny import TinyModelPaths, register_tiny
from ot_gradio.models.tiny.sd15 import save_unet_pipeline, tiny_sd2_components


def tiny_sd2_pipeline(seed: int = 0, prediction_type: str = "v_prediction"):
    from diffusers import StableDiffusionPipeline

    components = tiny_sd2_components(seed)
    components["scheduler"].register_to_config(prediction_type=prediction_type)
    return StableDiffusionPipeline(**components, safety_checker=None, feature_extractor=None, requires_safety_checker=False)


@register_tiny("sd2", 1)
def save_tiny_sd2(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny SD 2 with v-prediction (the 768 models' shape at tiny size)."""
    return save_unet_pipeline(root, "sd2", lambda: tiny_sd2_pipeline(seed, "v_prediction"))


@register_tiny("sd2-base", 1)
def save_tiny_sd2_base(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny SD 2 with epsilon prediction (the 512 "base" models)."""
    return save_unet_pipeline(root, "sd2-base", lambda: tiny_sd2_pipeline(seed, "epsilon"))
