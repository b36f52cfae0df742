"""Tiny random Flux.1 Fill dev (`tiny:flux-fill`): tiny Flux with the Fill transformer's inputs."""

from __future__ import annotations

import os

import torch

from ot_gradio.models.flux_fill import transformer_in_channels
from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.flux import tiny_flux_components, visible_output

TINY_FLUX_FILL_VERSION = 1


def tiny_flux_fill_components(seed: int = 0) -> dict:
    """Tiny Flux.1 dev's parts with a transformer reading the Fill inputs (384 values per token)."""
    from diffusers import FluxTransformer2DModel

    components = tiny_flux_components(seed)
    config = {k: v for k, v in components["transformer"].config.items() if not k.startswith("_")}
    config.update(in_channels=transformer_in_channels(16, 8), out_channels=64)
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel.from_config(config)
    visible_output(transformer.proj_out)
    return {**components, "transformer": transformer}


@register_tiny("flux-fill", TINY_FLUX_FILL_VERSION)
def save_tiny_flux_fill(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Flux.1 Fill dev as a diffusers folder and its transformer as a BFL-layout file."""
    from diffusers import FluxFillPipeline

    from ot_gradio.models.flux_keys import save_bfl_transformer

    def write_single(path, pipe):
        save_bfl_transformer(path, pipe.transformer, pipe.transformer.state_dict(), None, {"ot_gradio.tiny": "flux-fill"})

    return save_tiny(root, "flux1-fill-tiny-transformer.safetensors",
                     lambda: FluxFillPipeline(**tiny_flux_fill_components(seed)), write_single)
