"""Tiny random Krea 2 (`tiny:krea2`): the real classes at a fraction of the width, built in memory
in well under a second and saved in the diffusers layout Krea2Pipeline loads (plus the
transformer alone in the native layout), so tests go through the real loading code.

- Text encoder: a 4-layer Qwen3-VL (transformers' Qwen3VLModel, as the real `text_encoder`, with a
  one-block vision tower it never uses for prompts) and tiny/qwen_image.py's byte-level Qwen2
  tokenizer with the vision markers. The pipeline taps hidden states 1 to 4 (its
  `text_encoder_select_layers` in model_index.json; the real model taps 12 of Qwen3-VL-4B's 37).
- Transformer: Krea2Transformer2DModel, 2 blocks of 2 x 8, one layerwise and one refiner text
  fusion block, text width 32.
- VAE: tiny/qwen_image.py's AutoencoderKLQwenImage (Krea 2 ships Qwen-Image's VAE).
- Scheduler: Krea 2's FlowMatchEulerDiscreteScheduler (dynamic shifting from the token count,
  base 0.5 / max 1.15 over 256 to 6400 tokens).
"""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny, seeded_model
from ot_gradio.models.tiny.flux import visible_output
from ot_gradio.models.tiny.qwen_image import TEXT_WIDTH, tiny_qwen_vl_components, tiny_vl_text_config, vision_token_ids

TINY_KREA2_VERSION = 1
SELECT_LAYERS = (1, 2, 3, 4)
# Krea2Pipeline's documented scheduler config
SCHEDULER = dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                 base_image_seq_len=256, max_image_seq_len=6400)


def tiny_qwen3_vl_encoder(tokenizer, seed: int = 0):
    from transformers import Qwen3VLConfig, Qwen3VLModel

    rope = {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    text = tiny_vl_text_config(tokenizer, len(SELECT_LAYERS), rope_parameters=rope)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=TEXT_WIDTH,
                  patch_size=16, deepstack_visual_indexes=[0], num_position_embeddings=16)
    return seeded_model(Qwen3VLModel, Qwen3VLConfig(text_config=text, vision_config=vision, **vision_token_ids(tokenizer)), seed)


def tiny_krea2_transformer(seed: int = 0):
    from diffusers import Krea2Transformer2DModel

    torch.manual_seed(seed)
    transformer = Krea2Transformer2DModel(
        in_channels=16, num_layers=2, attention_head_dim=8, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32,
        timestep_embed_dim=16, text_hidden_dim=TEXT_WIDTH, num_text_layers=len(SELECT_LAYERS), text_num_attention_heads=2,
        text_num_key_value_heads=2, text_intermediate_size=32, num_layerwise_text_blocks=1, num_refiner_text_blocks=1,
        axes_dims_rope=(2, 2, 4),
    )
    visible_output(transformer.final_layer.linear)
    return transformer


def tiny_krea2_components(seed: int = 0) -> dict:
    return tiny_qwen_vl_components(tiny_qwen3_vl_encoder, tiny_krea2_transformer, SCHEDULER, seed)


@register_tiny("krea2", TINY_KREA2_VERSION)
def save_tiny_krea2(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Krea 2 as a diffusers folder (it taps the text encoder's layers 1 to 4) and its
    transformer as a native-layout file."""
    from diffusers import Krea2Pipeline

    from ot_gradio.models.krea2_keys import save_native_transformer

    def write_single(path, pipe):
        save_native_transformer(path, pipe.transformer.state_dict(), None, {"ot_gradio.tiny": "krea2"})

    return save_tiny(root, "krea2-tiny-transformer.safetensors",
                     lambda: Krea2Pipeline(**tiny_krea2_components(seed), text_encoder_select_layers=SELECT_LAYERS), write_single)
