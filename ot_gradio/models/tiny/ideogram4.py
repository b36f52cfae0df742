"""Tiny random Ideogram 4 (`tiny:ideogram4`): the real classes at a fraction of the width, built in
memory in about a second and saved in the diffusers layout of Ideogram4Pipeline, so tests go
through the real loading code.

- Text encoder: a Qwen3VLModel (as the real repo's `text_encoder`) with 36 text layers of width
  16 (the pipeline taps hidden states 0, 3, ... 33 and 35) and a one-layer vision tower prompts
  never use; tiny/z_image.py's Qwen tokenizer with a chat template that renders the content lists
  the pipeline passes (`<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n`).
- `transformer` and `unconditional_transformer`: Ideogram4Transformer2DModel, 2 layers of 2 heads
  of 16, text features 13 x 16 wide, input 4 x 8 latent channels; each with its own weights.
- VAE: tiny/flux2.py's AutoencoderKLFlux2 (8 latent channels, its batch-norm statistics set).
- Scheduler: FlowMatchEulerDiscreteScheduler at shift 1 (the pipeline sets its own sigmas).
- No `prompt_enhancer_head` (optional in the pipeline; not trained).
"""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny, seeded_model
from ot_gradio.models.tiny.flux import visible_output

TINY_IDEOGRAM4_VERSION = 1
TEXT_WIDTH = 16
TEXT_LAYERS = 36  # the pipeline reads hidden state 35
TAPPED_LAYERS = 13  # QWEN3_VL_ACTIVATION_LAYERS
# Qwen3-VL's template for text-only user turns (string or content-list messages), generation prompt last
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- set text = message['content'] if message['content'] is string else message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + text + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tiny_qwen3vl_encoder(vocab_size: int, pad_token_id: int, seed: int = 0):
    from transformers import Qwen3VLConfig, Qwen3VLModel

    text = {
        "vocab_size": vocab_size, "hidden_size": TEXT_WIDTH, "intermediate_size": 32, "num_hidden_layers": TEXT_LAYERS,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 1024,
        "pad_token_id": pad_token_id, "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0,
                                                          "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    }
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": TEXT_WIDTH,
              "deepstack_visual_indexes": [0], "num_position_embeddings": 16, "patch_size": 8}
    return seeded_model(Qwen3VLModel, Qwen3VLConfig(text_config=text, vision_config=vision), seed)


def tiny_ideogram4_transformer(seed: int = 0):
    from diffusers import Ideogram4Transformer2DModel

    from ot_gradio.models.tiny.flux2 import LATENT_CHANNELS

    torch.manual_seed(seed)
    transformer = Ideogram4Transformer2DModel(
        in_channels=4 * LATENT_CHANNELS, num_layers=2, attention_head_dim=16, num_attention_heads=2, intermediate_size=64,
        adaln_dim=16, llm_features_dim=TAPPED_LAYERS * TEXT_WIDTH, mrope_section=(4, 2, 2),
    )
    visible_output(transformer.final_layer.linear)
    return transformer


def tiny_ideogram4_components(seed: int = 0) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    from ot_gradio.models.tiny.flux2 import tiny_flux2_vae
    from ot_gradio.models.tiny.z_image import tiny_qwen_tokenizer

    tokenizer = tiny_qwen_tokenizer(2048)
    tokenizer.chat_template = CHAT_TEMPLATE
    return {
        "tokenizer": tokenizer, "text_encoder": tiny_qwen3vl_encoder(len(tokenizer), tokenizer.pad_token_id, seed),
        "transformer": tiny_ideogram4_transformer(seed), "unconditional_transformer": tiny_ideogram4_transformer(seed + 1),
        "vae": tiny_flux2_vae(seed), "scheduler": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0),
    }


@register_tiny("ideogram4", TINY_IDEOGRAM4_VERSION)
def save_tiny_ideogram4(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Ideogram 4 as a diffusers folder (no single file: Ideogram 4 loads from folders here)."""
    from diffusers import Ideogram4Pipeline

    return save_tiny(root, "no-single-file", lambda: Ideogram4Pipeline(**tiny_ideogram4_components(seed)))
