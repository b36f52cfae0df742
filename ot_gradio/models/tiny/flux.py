"""Tiny random Flux.1 dev (and the parts Chroma shares): the real classes at width 64, built in
memory (tokenizers included) in well under a second and saved in the diffusers layout, plus the
transformer alone in Black Forest Labs' layout, so tests go through the real loading code."""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.sd15 import tiny_clip_text_model, tiny_clip_tokenizer

TINY_FLUX_VERSION = 2
# 64 wide: bitsandbytes' NF4 layers on the CPU need input widths that are multiples of their
# 64-value block (OneTrainer's Flux preset stores the transformer and T5 in NF4)
T5_WIDTH = 64
CLIP_WIDTH = 64


def tiny_flux_vae(seed: int = 0):
    """Flux's VAE layout (16 latent channels, no quant convs, scaling and shift factors) at width 8-16."""
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 16, 16), layers_per_block=1, latent_channels=16, norm_num_groups=4, sample_size=64,
        scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False,
    )


def tiny_t5_encoder(tokenizer, seed: int = 0):
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    return T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer), d_model=T5_WIDTH, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
            relative_attention_num_buckets=8, feed_forward_proj="gated-gelu", dropout_rate=0.0,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )
    )


def tiny_flow_scheduler():
    """Flux.1 dev's FlowMatchEulerDiscreteScheduler config (shift 3, dynamic shifting)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
        base_image_seq_len=256, max_image_seq_len=4096,
    )


def visible_output(proj_out: torch.nn.Linear) -> None:
    """diffusers zero-initialises nothing here, but a small random output layer keeps the tiny
    model's predictions away from zero so tests see what training changes."""
    with torch.no_grad():
        proj_out.weight.normal_(0.0, 0.05)


def tiny_flux_components(seed: int = 0) -> dict:
    from diffusers import FluxTransformer2DModel

    from ot_gradio.models.tiny.pixart import tiny_t5_tokenizer

    tokenizer = tiny_clip_tokenizer()
    tokenizer_2 = tiny_t5_tokenizer(model_max_length=512)
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=32, num_attention_heads=2,
        joint_attention_dim=T5_WIDTH, pooled_projection_dim=CLIP_WIDTH, guidance_embeds=True, axes_dims_rope=(8, 12, 12),
    )
    visible_output(transformer.proj_out)
    return {
        "tokenizer": tokenizer,
        "text_encoder": tiny_clip_text_model(len(tokenizer), hidden=CLIP_WIDTH, seed=seed),
        "tokenizer_2": tokenizer_2,
        "text_encoder_2": tiny_t5_encoder(tokenizer_2, seed),
        "vae": tiny_flux_vae(seed),
        "transformer": transformer,
        "scheduler": tiny_flow_scheduler(),
    }


@register_tiny("flux", TINY_FLUX_VERSION)
def save_tiny_flux(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Flux.1 dev as a diffusers folder and its transformer as a BFL-layout file."""
    from diffusers import FluxPipeline

    from ot_gradio.models.flux_keys import save_bfl_transformer

    def write_single(path, pipe):
        save_bfl_transformer(path, pipe.transformer, pipe.transformer.state_dict(), None, {"ot_gradio.tiny": "flux"})

    return save_tiny(root, "flux1-tiny-transformer.safetensors", lambda: FluxPipeline(**tiny_flux_components(seed)), write_single)
