"""Tiny random Wan 2.1 text-to-video (`tiny:wan`): the real classes at a fraction of the width,
built in memory in well under a second and saved in the diffusers layout of
Wan-AI/Wan2.1-T2V-1.3B-Diffusers (model_index.json names WanPipeline, UMT5EncoderModel,
T5TokenizerFast, AutoencoderKLWan, WanTransformer3DModel and UniPCMultistepScheduler in flow
mode, shift 3), so tests go through the real loading code.

- Text encoder: a 2-layer UMT5 encoder with the in-memory T5 tokenizer the other T5 families'
  tiny models use (tiny/pixart.py).
- Transformer: WanTransformer3DModel, 2 blocks of 2 heads x 12, patch (1, 2, 2), 16 channels.
- VAE: AutoencoderKLWan at base width 4, 16 latent channels, 4x in time and 8x per side, with
  the real model's latents_mean / latents_std (its defaults).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny, seeded_model
from ot_gradio.models.tiny.flux import visible_output
from ot_gradio.models.tiny.pixart import tiny_t5_tokenizer
from ot_gradio.models.wan import DEFAULT_SEQUENCE_LENGTH

TINY_WAN_VERSION = 1
UMT5_WIDTH = 32


def tiny_umt5_encoder(tokenizer, seed: int = 0):
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(
        vocab_size=len(tokenizer), d_model=UMT5_WIDTH, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, feed_forward_proj="gated-gelu", dropout_rate=0.0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return seeded_model(UMT5EncoderModel, config, seed)


def tiny_wan_transformer(seed: int = 0):
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16, out_channels=16,
        text_dim=UMT5_WIDTH, freq_dim=32, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        eps=1e-6, rope_max_seq_len=32,
    )
    visible_output(transformer.proj_out)
    return transformer


def tiny_wan_vae(seed: int = 0):
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    return AutoencoderKLWan(base_dim=4, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True])


def tiny_wan_components(seed: int = 0) -> dict:
    from diffusers import UniPCMultistepScheduler

    tokenizer = tiny_t5_tokenizer(DEFAULT_SEQUENCE_LENGTH)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                                        num_train_timesteps=1000)
    return {"tokenizer": tokenizer, "text_encoder": tiny_umt5_encoder(tokenizer, seed), "transformer": tiny_wan_transformer(seed),
            "vae": tiny_wan_vae(seed), "scheduler": scheduler}


def _hub_model_index(folder: Path) -> None:
    """model_index.json as the hub repo has it (the tokenizer class is T5TokenizerFast there)."""
    path = folder / "model_index.json"
    index = json.loads(path.read_text())
    index["tokenizer"] = ["transformers", "T5TokenizerFast"]
    path.write_text(json.dumps(index, indent=2))


@register_tiny("wan", TINY_WAN_VERSION)
def save_tiny_wan(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Wan 2.1 as a diffusers folder (no single file: Wan loads from folders here)."""
    from diffusers import WanPipeline

    return save_tiny(root, "no-single-file", lambda: WanPipeline(**tiny_wan_components(seed)), finish_folder=_hub_model_index)
