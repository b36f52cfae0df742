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

from ot_gradio.config.enums import ModelType
from ot_gradio.models.pixart import PixArtAlpha
from ot_gradio.models.registry import register_family

SIGMA_SEQUENCE_LENGTH = 300


@register_family(ModelType.PIXART_SIGMA)
class PixArtSigma(PixArtAlpha):
    pipeline_class_name = "PixArtSigmaPipeline"
    architecture = "pixart-sigma"
    default_sequence_length = SIGMA_SEQUENCE_LENGTH
