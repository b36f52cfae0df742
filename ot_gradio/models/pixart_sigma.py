"""PixArt-Σ: PixArt-α's family (models/pixart.py) with what Σ changes.

What differs from PixArt-α (diffusers' PixArtSigmaPipeline, OneTrainer's PIXART_SIGMA):
- T5 reads up to 300 tokens (the pipeline's `max_sequence_length`) where α reads 120.
- The VAE is SDXL's (the same AutoencoderKL class, scaling 0.13025): read from the model.
- The transformer has no size micro-conditions (`use_additional_conditions` off) and scales its
  position embedding by `interpolation_scale`; both come from its config, so `predict` is α's.
- Same DDPM objective (linear betas, epsilon, learned variance trained with the variational
  bound), same layer presets, same original-layout transformer file.
- PixArtSigmaPipeline has no `load_lora_weights`: our LoRA files are reloaded through the
  transformer's PEFT adapter API (or merged from the kohya file), as for α.
"""

from __future__ import annotations

import os
from pathlib import Path

from ot_gradio.config.enums import ModelType
from ot_gradio.fsutil import atomic_write_dir
from ot_gradio.models.pixart import PixArtAlpha, tiny_pixart_components
from ot_gradio.models.registry import register_family
from ot_gradio.models.tiny import TinyModelPaths, register_tiny

SIGMA_SEQUENCE_LENGTH = 300


@register_family(ModelType.PIXART_SIGMA)
class PixArtSigma(PixArtAlpha):
    model_type = ModelType.PIXART_SIGMA
    lora_base_model_version = "pixart_sigma"
    pipeline_class_name = "PixArtSigmaPipeline"
    display_name = "PixArt-Σ"
    hub_example = "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS"
    architecture = "pixart-sigma"
    default_sequence_length = SIGMA_SEQUENCE_LENGTH


# -------------------------------------------------------------------- tiny model

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
    an original-layout single file. Written atomically; existing copies are reused."""
    from diffusers import PixArtSigmaPipeline

    from ot_gradio.models.pixart_single_file import save_original_transformer

    root = Path(root)
    paths = TinyModelPaths(root / "diffusers", root / "pixart-sigma-transformer.safetensors")
    if (paths.diffusers_dir / "model_index.json").is_file() and paths.single_file.is_file():
        return paths
    components = tiny_pixart_sigma_components(seed)
    if not (paths.diffusers_dir / "model_index.json").is_file():
        pipe = PixArtSigmaPipeline(**components)
        atomic_write_dir(paths.diffusers_dir, lambda tmp: pipe.save_pretrained(tmp, safe_serialization=True))
    if not paths.single_file.is_file():
        transformer = components["transformer"]
        save_original_transformer(paths.single_file, transformer, transformer.state_dict(),
                                  metadata={"ot_gradio.tiny": "pixart-sigma"})
    return paths
