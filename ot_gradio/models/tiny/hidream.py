"""Tiny random HiDream-I1 (`tiny:hidream`): the real classes at a fraction of the width, built in
memory in well under a second and saved as the diffusers folder HiDreamImagePipeline writes
(model_index.json naming CLIPTextModelWithProjection twice, T5EncoderModel, LlamaForCausalLM,
AutoencoderKL, HiDreamImageTransformer2DModel and FlowMatchEulerDiscreteScheduler at shift 3).
Unlike HiDream-ai's repos it holds its Llama (text_encoder_4, tokenizer_4), so it loads alone;
the loading tests also take the Llama out into a folder of its own, as the hub has it.

- CLIP-L and CLIP-G: 2-layer projected CLIP text models of width 32 and 48 with 128 positions
  (HiDream's CLIPs read the pipeline's 128 tokens), the byte-level CLIP tokenizer (tiny/sd15.py).
- T5: a 2-layer T5 encoder of width 64 with the character T5 tokenizer (tiny/pixart.py).
- Llama: a 2-layer LlamaForCausalLM of width 32 with the Llama 3 style BPE tokenizer of
  tiny/hunyuan_video.py; the transformer reads both layers' states.
- Transformer: 1 double and 1 single mixture-of-experts block (2 routed experts, 1 active) of
  2 heads x 16, patch 2, 16 channels, at most 32x32 latent pixels square.
- VAE: Flux's layout (tiny/flux.py) with its scaling and shift factors.
"""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny, seeded_model
from ot_gradio.models.tiny.flux import tiny_flux_vae, visible_output
from ot_gradio.models.tiny.hunyuan_video import tiny_llama3_tokenizer
from ot_gradio.models.tiny.pixart import tiny_t5_tokenizer
from ot_gradio.models.tiny.sd15 import tiny_clip_tokenizer

TINY_HIDREAM_VERSION = 1
CLIP_L_WIDTH, CLIP_G_WIDTH, T5_WIDTH, LLAMA_WIDTH = 32, 48, 64, 32
TOKENS = 128  # the pipeline's max_sequence_length


def _clip(vocab: int, width: int, seed: int):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=vocab, hidden_size=width, intermediate_size=width * 2, projection_dim=width, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=TOKENS, bos_token_id=vocab - 2, eos_token_id=vocab - 1, pad_token_id=vocab - 1,
    )
    return seeded_model(CLIPTextModelWithProjection, config, seed)


def _t5(tokenizer, seed: int):
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=len(tokenizer), d_model=T5_WIDTH, d_kv=8, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
        feed_forward_proj="gated-gelu", dropout_rate=0.0, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return seeded_model(T5EncoderModel, config, seed)


def _llama(tokenizer, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=LLAMA_WIDTH, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=256, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return seeded_model(LlamaForCausalLM, config, seed)


def tiny_hidream_transformer(seed: int = 0):
    from diffusers import HiDreamImageTransformer2DModel

    torch.manual_seed(seed)
    transformer = HiDreamImageTransformer2DModel(
        patch_size=2, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
        caption_channels=[T5_WIDTH, LLAMA_WIDTH], text_emb_dim=CLIP_L_WIDTH + CLIP_G_WIDTH, num_routed_experts=2,
        num_activated_experts=1, axes_dims_rope=(8, 4, 4), max_resolution=(32, 32), llama_layers=[0, 1],
    )
    visible_output(transformer.final_layer.linear)
    return transformer


def tiny_hidream_components(seed: int = 0) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    tokenizer, tokenizer_2, tokenizer_3 = tiny_clip_tokenizer(), tiny_clip_tokenizer(), tiny_t5_tokenizer(TOKENS)
    tokenizer_4 = tiny_llama3_tokenizer(model_max_length=TOKENS)
    return {
        "tokenizer": tokenizer, "text_encoder": _clip(len(tokenizer), CLIP_L_WIDTH, seed),
        "tokenizer_2": tokenizer_2, "text_encoder_2": _clip(len(tokenizer_2), CLIP_G_WIDTH, seed + 1),
        "tokenizer_3": tokenizer_3, "text_encoder_3": _t5(tokenizer_3, seed + 2),
        "tokenizer_4": tokenizer_4, "text_encoder_4": _llama(tokenizer_4, seed + 3),
        "transformer": tiny_hidream_transformer(seed), "vae": tiny_flux_vae(seed),
        "scheduler": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0),
    }


@register_tiny("hidream", TINY_HIDREAM_VERSION)
def save_tiny_hidream(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny HiDream as a diffusers folder (no single file: it loads from folders here)."""
    from diffusers import HiDreamImagePipeline

    return save_tiny(root, "no-single-file", lambda: HiDreamImagePipeline(**tiny_hidream_components(seed)))
