"""Tiny random Wan 2.1 text-to-video (`tiny:wan`), Wan 2.2 TI2V 5B (`tiny:wan22-5b`: 48
latent channels, Wan 2.2's residual VAE with patch 2, flow shift 5) and Wan 2.2 T2V A14B
(`tiny:wan22-a14b`: Wan 2.1's parts with a second transformer, boundary_ratio 0.875) and Wan 2.2 I2V A14B
(`tiny:wan22-i2v-a14b`: the same with 36-channel transformers, boundary_ratio 0.9) and Wan 2.1 I2V
(`tiny:wan21-i2v`: one 36-channel transformer reading a 2-layer CLIP vision tower's embeddings): the real classes at a fraction of the width,
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
CLIP_WIDTH = 32  # the tiny CLIP vision tower's width, Wan 2.1 I2V's image_dim (the real one: 1280)


def tiny_umt5_encoder(tokenizer, seed: int = 0):
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(
        vocab_size=len(tokenizer), d_model=UMT5_WIDTH, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, feed_forward_proj="gated-gelu", dropout_rate=0.0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return seeded_model(UMT5EncoderModel, config, seed)


def tiny_wan_transformer(seed: int = 0, channels: int = 16, in_channels: int | None = None, **image):
    """`in_channels`: an image-to-video transformer's (the noisy latents, a 4-channel mask and the first frame's latents: 36);
    `image`: Wan 2.1 I2V's `image_dim` and `added_kv_proj_dim` (the CLIP embeddings' width, the attention's)."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=in_channels or channels, out_channels=channels,
        text_dim=UMT5_WIDTH, freq_dim=32, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        eps=1e-6, rope_max_seq_len=32, **image,
    )
    visible_output(transformer.proj_out)
    return transformer


def tiny_wan_vae(seed: int = 0):
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    return AutoencoderKLWan(base_dim=4, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True])


def tiny_wan22_vae(seed: int = 0):
    """Wan 2.2's VAE at base width 8: 48 latent channels, residual blocks, patch 2 (12 channels in), 16x per side."""
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    return AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=48, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                            temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12,
                            patch_size=2, scale_factor_spatial=16, latents_mean=[0.02 * (i % 7) - 0.06 for i in range(48)],
                            latents_std=[0.8 + 0.05 * (i % 9) for i in range(48)])


def tiny_wan_components(seed: int = 0, version: str = "2.1") -> dict:
    from diffusers import UniPCMultistepScheduler

    tokenizer = tiny_t5_tokenizer(DEFAULT_SEQUENCE_LENGTH)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0 if version == "2.1" else 5.0,
                                        num_train_timesteps=1000)
    wan22 = version == "2.2"
    return {"tokenizer": tokenizer, "text_encoder": tiny_umt5_encoder(tokenizer, seed),
            "transformer": tiny_wan_transformer(seed, 48 if wan22 else 16), "vae": tiny_wan22_vae(seed) if wan22 else tiny_wan_vae(seed),
            "scheduler": scheduler}


def tiny_wan_i2v_components(seed: int = 0) -> dict:
    """Wan 2.2 I2V A14B's parts: Wan 2.1's with two 36-channel transformers (the second: the low-noise expert)."""
    return {**tiny_wan_components(seed), "transformer": tiny_wan_transformer(seed, in_channels=36),
            "transformer_2": tiny_wan_transformer(seed + 1, in_channels=36)}


def tiny_clip_vision(seed: int = 0, width: int = CLIP_WIDTH):
    """CLIP's vision tower at 28 px in patches of 14 (5 tokens: 4 patches and the class token),
    two layers (the pipeline reads the first's output, the penultimate), with its image processor
    as Wan-AI/Wan2.1-I2V-14B-480P-Diffusers' (bicubic to 224 then a centre cut, OpenAI's mean
    and std) at 28 px."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(hidden_size=width, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=14,
                              image_size=28, hidden_act="gelu", layer_norm_eps=1e-5, projection_dim=16)
    processor = CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}, resample=3,
                                   image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711])
    return seeded_model(CLIPVisionModel, config, seed), processor


def tiny_wan21_i2v_components(seed: int = 0, image_dim: int = CLIP_WIDTH) -> dict:
    """Wan 2.1 I2V's parts: Wan 2.1's with a 36-channel transformer that reads CLIP image
    embeddings of width `image_dim` (ComfyUI's model: 1280), the CLIP vision tower and its processor."""
    encoder, processor = tiny_clip_vision(seed, image_dim)
    transformer = tiny_wan_transformer(seed, in_channels=36, image_dim=image_dim, added_kv_proj_dim=24)
    return {**tiny_wan_components(seed), "transformer": transformer, "image_encoder": encoder, "image_processor": processor}


def _hub_model_index(folder: Path, **extra) -> None:
    """model_index.json as the hub repo has it (the tokenizer class is T5TokenizerFast there)."""
    path = folder / "model_index.json"
    index = json.loads(path.read_text())
    index["tokenizer"] = ["transformers", "T5TokenizerFast"]
    index.update(extra)
    path.write_text(json.dumps(index, indent=2))


@register_tiny("wan", TINY_WAN_VERSION)
def save_tiny_wan(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Wan 2.1 as a diffusers folder (no single file: Wan loads from folders here)."""
    from diffusers import WanPipeline

    return save_tiny(root, "no-single-file", lambda: WanPipeline(**tiny_wan_components(seed)), finish_folder=_hub_model_index)


@register_tiny("wan22-5b", TINY_WAN_VERSION)
def save_tiny_wan22_5b(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Wan 2.2 TI2V 5B as a diffusers folder in Wan-AI/Wan2.2-TI2V-5B-Diffusers' layout
    (model_index.json with `expand_timesteps` true and no `transformer_2`, as the hub has it)."""
    from diffusers import WanPipeline

    return save_tiny(root, "no-single-file", lambda: WanPipeline(**tiny_wan_components(seed, "2.2"), expand_timesteps=True),
                     finish_folder=lambda folder: _hub_model_index(folder, boundary_ratio=None, expand_timesteps=True))


@register_tiny("wan22-a14b", TINY_WAN_VERSION)
def save_tiny_wan22_a14b(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Wan 2.2 T2V A14B as a diffusers folder in Wan-AI/Wan2.2-T2V-A14B-Diffusers' layout:
    Wan 2.1's parts, `transformer_2` (the low-noise expert, its own weights) and boundary_ratio
    0.875 in model_index.json."""
    from diffusers import WanPipeline

    def build():
        return WanPipeline(**tiny_wan_components(seed), transformer_2=tiny_wan_transformer(seed + 1), boundary_ratio=0.875)

    return save_tiny(root, "no-single-file", build,
                     finish_folder=lambda folder: _hub_model_index(folder, boundary_ratio=0.875, expand_timesteps=False))


@register_tiny("wan22-i2v-a14b", TINY_WAN_VERSION)
def save_tiny_wan22_i2v_a14b(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Wan 2.2 I2V A14B as a diffusers folder in Wan-AI/Wan2.2-I2V-A14B-Diffusers' layout:
    WanImageToVideoPipeline with two 36-channel transformers, no image encoder nor image processor
    (null in model_index.json, as the hub has them) and boundary_ratio 0.9."""
    from diffusers import WanImageToVideoPipeline

    return save_tiny(root, "no-single-file", lambda: WanImageToVideoPipeline(**tiny_wan_i2v_components(seed), boundary_ratio=0.9),
                     finish_folder=lambda folder: _hub_model_index(folder, boundary_ratio=0.9, expand_timesteps=False))


@register_tiny("wan21-i2v", TINY_WAN_VERSION)
def save_tiny_wan21_i2v(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Wan 2.1 I2V as a diffusers folder in Wan-AI/Wan2.1-I2V-14B-480P-Diffusers' layout:
    WanImageToVideoPipeline with one 36-channel transformer, the CLIP image encoder and its
    processor, no transformer_2 and no boundary_ratio."""
    from diffusers import WanImageToVideoPipeline

    return save_tiny(root, "no-single-file", lambda: WanImageToVideoPipeline(**tiny_wan21_i2v_components(seed)),
                     finish_folder=lambda folder: _hub_model_index(folder, boundary_ratio=None, expand_timesteps=False))
