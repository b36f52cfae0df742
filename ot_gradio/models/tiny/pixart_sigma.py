"""Tiny random PixArt-Σ (`tiny:pixart-sigma`): tiny PixArt-α's parts laid out as Σ."""

from __future__ import annotations

import os

from ot_gradio.models.pixart_sigma import SIGMA_SEQUENCE_LENGTH
from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.pixart import tiny_pixart_components

TINY_PIXART_SIGMA_VERSION = 1


def tiny_pixart_sigma_components(seed: int = 0) -> dict:
    """The tiny PixArt-α parts laid out as Σ: no micro-conditions, interpolation scale 2 (the
    1024 model's), T5 tokenizer for 300 tokens."""
    components = tiny_pixart_components(seed, use_additional_conditions=False, interpolation_scale=2)
    components["tokenizer"].model_max_length = SIGMA_SEQUENCE_LENGTH
    return components


@register_tiny("pixart-sigma", TINY_PIXART_SIGMA_VERSION)
def save_tiny_pixart_sigma(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny PixArt-Σ as a diffusers folder (PixArtSigmaPipeline layout) and its transformer as
    an original-layout single file."""
    from diffusers import PixArtSigmaPipeline

    from ot_gradio.models.pixart_single_file import save_original_transformer

    def write_single(path, pipe):
        save_original_transformer(path, pipe.transformer, pipe.transformer.state_dict(), metadata={"ot_gradio.tiny": "pixart-sigma"})

    return save_tiny(root, "pixart-sigma-transformer.safetensors",
                     lambda: PixArtSigmaPipeline(**tiny_pixart_sigma_components(seed)), write_single)
