"""Tiny random Qwen-Image (`tiny:qwen-image`): the real classes at a fraction of the width, built in
memory in well under a second and saved in the diffusers layout (plus the transformer alone as
the single file ComfyUI and `from_single_file` read), so tests go through the real loading code.

- Text encoder: a 2-layer Qwen2.5-VL (transformers' Qwen2_5_VLForConditionalGeneration, as the
  real repo's `text_encoder`, with a one-block vision tower it never uses for prompts) and
  tiny/z_image.py's byte-level Qwen2 tokenizer plus Qwen2.5-VL's vision marker tokens.
- Transformer: QwenImageTransformer2DModel, patch 2, 2 blocks of 2 x 8, text width 32.
- VAE: AutoencoderKLQwenImage (a video VAE: images are one frame) with 4 latent channels, one 2x
  downsampling, and per-channel latents_mean / latents_std as the real one has (16 channels, 8x).
- Scheduler: Qwen-Image's FlowMatchEulerDiscreteScheduler (dynamic shifting from the token count,
  exponential time shift, shift_terminal 0.02).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny, seeded_model
from ot_gradio.models.tiny.flux import visible_output

TINY_QWEN_IMAGE_VERSION = 1
TEXT_WIDTH = 32
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
# Qwen-Image's scheduler/scheduler_config.json
SCHEDULER = dict(
    num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9, base_image_seq_len=256,
    max_image_seq_len=8192, shift_terminal=0.02, time_shift_type="exponential",
)


def tiny_qwen_vl_tokenizer():
    """tiny/z_image.py's Qwen2 tokenizer (bytes, Qwen's chat tokens) with the vision markers added."""
    from tokenizers import AddedToken

    from ot_gradio.models.tiny.z_image import tiny_qwen_tokenizer

    tokenizer = tiny_qwen_tokenizer(model_max_length=1024 + 34)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in VISION_TOKENS], special_tokens=True)
    return tokenizer


def tiny_vl_text_config(tokenizer, layers: int, **rope) -> dict:
    """The text model of a tiny Qwen VL encoder (Qwen-Image's Qwen2.5-VL, Krea 2's Qwen3-VL) on
    `tokenizer`: `layers` layers of TEXT_WIDTH, 2 heads of 16, its pad token as bos / eos / pad;
    `rope`: the version's rope settings (and other text options)."""
    pad = tokenizer.pad_token_id
    return dict(vocab_size=len(tokenizer), hidden_size=TEXT_WIDTH, intermediate_size=64, num_hidden_layers=layers,
                num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=2048,
                bos_token_id=pad, eos_token_id=pad, pad_token_id=pad, **rope)


def vision_token_ids(tokenizer) -> dict:
    """A Qwen VL config's ids of the vision markers (VISION_TOKENS) in `tokenizer`."""
    start, end, image, video = (tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS)
    return dict(vision_start_token_id=start, vision_end_token_id=end, image_token_id=image, video_token_id=video)


def tiny_qwen_vl_encoder(tokenizer, seed: int = 0):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    text = tiny_vl_text_config(tokenizer, 2, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, rope_theta=1_000_000.0,
                               tie_word_embeddings=True)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=TEXT_WIDTH, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[0])
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **vision_token_ids(tokenizer))
    return seeded_model(Qwen2_5_VLForConditionalGeneration, config, seed)


def tiny_qwen_image_transformer(seed: int = 0, **config):
    """`config`: more of the transformer's config (Qwen-Image-Edit-2511's `zero_cond_t`)."""
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=TEXT_WIDTH, axes_dims_rope=(2, 2, 4), **config,
    )
    visible_output(transformer.proj_out)
    return transformer


def tiny_qwen_image_vae(seed: int = 0):
    from diffusers import AutoencoderKLQwenImage

    torch.manual_seed(seed)
    return AutoencoderKLQwenImage(
        base_dim=16, z_dim=4, dim_mult=[1, 2], num_res_blocks=1, attn_scales=[], temperal_downsample=[False],
        latents_mean=[0.1, -0.2, 0.3, 0.0], latents_std=[1.5, 2.0, 0.8, 1.2],
    )


def tiny_qwen_vl_components(text_encoder: Callable, transformer: Callable, scheduler: dict, seed: int = 0) -> dict:
    """The parts of a pipeline on the tiny Qwen VL tokenizer and Qwen-Image VAE (Qwen-Image, Krea 2):
    the family's `text_encoder(tokenizer, seed)` and `transformer(seed)`, and a
    FlowMatchEulerDiscreteScheduler of the `scheduler` config."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    tokenizer = tiny_qwen_vl_tokenizer()
    return {"tokenizer": tokenizer, "text_encoder": text_encoder(tokenizer, seed), "transformer": transformer(seed),
            "vae": tiny_qwen_image_vae(seed), "scheduler": FlowMatchEulerDiscreteScheduler(**scheduler)}


def tiny_qwen_image_components(seed: int = 0) -> dict:
    return tiny_qwen_vl_components(tiny_qwen_vl_encoder, tiny_qwen_image_transformer, SCHEDULER, seed)


@register_tiny("qwen-image", TINY_QWEN_IMAGE_VERSION)
def save_tiny_qwen_image(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Qwen-Image as a diffusers folder and its transformer as a single file."""
    from diffusers import QwenImagePipeline

    from ot_gradio.models.qwen_image import save_transformer_file

    def write_single(path, pipe):
        save_transformer_file(path, pipe.transformer.state_dict(), None, {"ot_gradio.tiny": "qwen-image"})

    return save_tiny(root, "qwen-image-tiny-transformer.safetensors",
                     lambda: QwenImagePipeline(**tiny_qwen_image_components(seed)), write_single)
