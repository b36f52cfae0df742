"""Tiny random ERNIE-Image (`tiny:ernie`): the real classes at a fraction of the width, built in
memory in about a second and saved in the diffusers layout, so tests go through the real loading
code (and the transformer alone, as a single file).

- Text encoder: a bare Mistral3Model (as the real repo's `text_encoder`) with 3 text layers of
  width 16 and a one-layer Pixtral vision tower prompts never use; tiny/flux2.py's byte-level
  Mistral tokenizer, which here puts `<s>` before each prompt as the hub's tokenizer.json does.
- Transformer: ErnieImageTransformer2DModel, 2 layers of 2 heads of 16, text width 16, reading
  the 4 x 8 patchified channels of tiny/flux2.py's AutoencoderKLFlux2; its zero-initialised
  modulation and output layers drawn at random, so every layer changes what it predicts.
- Scheduler: FlowMatchEulerDiscreteScheduler with shift 3 (no dynamic shifting: the pipeline
  sets its own linear sigmas). No prompt enhancer (`pe`, optional in the pipeline).
"""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.flux import visible_output
from ot_gradio.models.tiny.flux2 import LATENT_CHANNELS, TEXT_WIDTH, tiny_flux2_vae, tiny_mistral3_encoder, tiny_mistral_tokenizer

TINY_ERNIE_VERSION = 2


def tiny_ernie_tokenizer():
    """tiny/flux2.py's Mistral tokenizer with the BOS the hub's tokenizer adds to every text."""
    from tokenizers.processors import TemplateProcessing

    tokenizer = tiny_mistral_tokenizer()
    bos = tokenizer.bos_token
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tokenizer.bos_token_id)])
    return tokenizer


def tiny_ernie_transformer(seed: int = 0):
    from diffusers import ErnieImageTransformer2DModel

    torch.manual_seed(seed)
    transformer = ErnieImageTransformer2DModel(
        hidden_size=32, num_attention_heads=2, num_layers=2, ffn_hidden_size=64, in_channels=4 * LATENT_CHANNELS,
        out_channels=4 * LATENT_CHANNELS, patch_size=1, text_in_dim=TEXT_WIDTH, rope_axes_dim=(4, 6, 6),
    )
    visible_output(transformer.final_linear)
    visible_output(transformer.adaLN_modulation[-1])
    return transformer


def tiny_ernie_components(seed: int = 0) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    tokenizer = tiny_ernie_tokenizer()
    return {
        "tokenizer": tokenizer, "text_encoder": tiny_mistral3_encoder(tokenizer, seed, layers=3, head=False),
        "transformer": tiny_ernie_transformer(seed), "vae": tiny_flux2_vae(seed),
        "scheduler": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0),
    }


@register_tiny("ernie", TINY_ERNIE_VERSION)
def save_tiny_ernie(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    from diffusers import ErnieImagePipeline

    from ot_gradio.models.key_layout import save_tensors

    def transformer_file(path, pipe) -> None:  # the transformer alone, as ComfyUI's ERNIE-Image files name it
        save_tensors(path, {f"model.diffusion_model.{k}": v for k, v in pipe.transformer.state_dict().items()}, {})

    return save_tiny(root, "ernie-image.safetensors", lambda: ErnieImagePipeline(**tiny_ernie_components(seed)), transformer_file)
