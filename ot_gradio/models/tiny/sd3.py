"""Tiny random Stable Diffusion 3 / 3.5 models for tests and the offline demo (`tiny:sd3`,
`tiny:sd35`).

SD 3's layout at a fraction of the width: CLIP-L and OpenCLIP-G as projected CLIP text models
(different widths, as 768 and 1280 are), a T5 encoder wider than both CLIPs together (the
pipeline pads their hidden states to T5's width), an MMDiT whose pooled input is both CLIP
projections side by side, a 16-channel VAE with SD 3's scaling and shift factors and the
flow-matching Euler scheduler at shift 3. SD 3.5 adds RMS q/k norms (and, in Medium, a second
attention in the first blocks). Built in memory (tokenizers too) and saved as diffusers folders
and single files.
"""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.pixart import tiny_t5_tokenizer
from ot_gradio.models.tiny.sd15 import tiny_clip_tokenizer

TINY_SD3_VERSION = 2  # 2: position embeddings up to 1024 px (OneTrainer presets train at 1024)
CLIP_L_WIDTH, CLIP_G_WIDTH, T5_WIDTH = 32, 48, 96
T5_TOKENS = 77


def _clip(vocab: int, width: int, layers: int, act: str, seed: int):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    return CLIPTextModelWithProjection(
        CLIPTextConfig(
            vocab_size=vocab, hidden_size=width, intermediate_size=width * 2, projection_dim=width,
            num_hidden_layers=layers, num_attention_heads=2, max_position_embeddings=77, hidden_act=act,
            bos_token_id=vocab - 2, eos_token_id=vocab - 1, pad_token_id=vocab - 1,
        )
    )


def tiny_sd3_components(seed: int = 0, *, sd35: bool = False) -> dict:
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from transformers import T5Config, T5EncoderModel

    tokenizer, tokenizer_2 = tiny_clip_tokenizer(), tiny_clip_tokenizer()
    tokenizer_3 = tiny_t5_tokenizer(T5_TOKENS)
    vocab = len(tokenizer)
    text_encoder = _clip(vocab, CLIP_L_WIDTH, 2, "quick_gelu", seed)
    text_encoder_2 = _clip(vocab, CLIP_G_WIDTH, 3, "gelu", seed + 1)
    torch.manual_seed(seed + 2)
    text_encoder_3 = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer_3), d_model=T5_WIDTH, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            relative_attention_num_buckets=8, feed_forward_proj="gated-gelu", dropout_rate=0.0,
            pad_token_id=tokenizer_3.pad_token_id, eos_token_id=tokenizer_3.eos_token_id,
        )
    )
    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(
        sample_size=32, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=8,
        num_attention_heads=2, joint_attention_dim=T5_WIDTH, caption_projection_dim=16,
        pooled_projection_dim=CLIP_L_WIDTH + CLIP_G_WIDTH, pos_embed_max_size=64,
        qk_norm="rms_norm" if sd35 else None, dual_attention_layers=(0,) if sd35 else (),
    )
    torch.manual_seed(seed)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 8, 16, 16), layers_per_block=1,
        latent_channels=16, norm_num_groups=4, sample_size=64, scaling_factor=1.5305, shift_factor=0.0609,
        use_quant_conv=False, use_post_quant_conv=False,
    )
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    return {
        "transformer": transformer, "scheduler": scheduler, "vae": vae,
        "text_encoder": text_encoder, "tokenizer": tokenizer,
        "text_encoder_2": text_encoder_2, "tokenizer_2": tokenizer_2,
        "text_encoder_3": text_encoder_3, "tokenizer_3": tokenizer_3,
    }


def tiny_sd3_pipeline(seed: int = 0, *, sd35: bool = False):
    from diffusers import StableDiffusion3Pipeline

    return StableDiffusion3Pipeline(**tiny_sd3_components(seed, sd35=sd35))


def _save(root: str | os.PathLike, sd35: bool, seed: int) -> TinyModelPaths:
    """The diffusers folder and the transformer + VAE single file (SAI's layout, as SD 3.5 ships)."""
    from ot_gradio.models.sd3_single_file import save_sd3_single_file

    name = "sd35" if sd35 else "sd3"

    def write_single(path, pipe):
        save_sd3_single_file(path, pipe.transformer, pipe.vae, metadata={"ot_gradio.tiny": name})

    return save_tiny(root, f"{name}.safetensors", lambda: tiny_sd3_pipeline(seed, sd35=sd35), write_single)


@register_tiny("sd3", TINY_SD3_VERSION)
def save_tiny_sd3(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    return _save(root, False, seed)


@register_tiny("sd35", TINY_SD3_VERSION)
def save_tiny_sd35(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    return _save(root, True, seed)
