"""Tiny random SDXL and SDXL inpainting models (`tiny:sdxl`, `tiny:sdxl-inpainting`)."""

from __future__ import annotations

import os

import torch

from ot_gradio.models.sd_inpainting import MASK_CHANNELS
from ot_gradio.models.sdxl_single_file import save_sdxl_single_file
from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.sd15 import tiny_clip_text_model, tiny_clip_tokenizer, tiny_vae


def tiny_sdxl_components(seed: int = 0, in_channels: int = 4) -> dict:
    """SDXL's shape at tiny size: three UNet levels (no attention at the top, more transformer
    layers at the bottom), linear projections, text-time added conditioning, a quick_gelu CLIP
    and a wider gelu OpenCLIP with a projection (different widths, as 768 and 1280 are, which is
    also how `from_single_file` tells the two embedders apart)."""
    from diffusers import EulerDiscreteScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    tokenizer, tokenizer_2 = tiny_clip_tokenizer(), tiny_clip_tokenizer()
    vocab = len(tokenizer)
    text_encoder = tiny_clip_text_model(vocab, hidden=32, seed=seed)
    torch.manual_seed(seed + 1)
    text_encoder_2 = CLIPTextModelWithProjection(
        CLIPTextConfig(
            vocab_size=vocab,
            hidden_size=48,
            intermediate_size=96,
            projection_dim=24,
            num_hidden_layers=3,
            num_attention_heads=2,
            max_position_embeddings=77,
            hidden_act="gelu",
            bos_token_id=vocab - 2,
            eos_token_id=vocab - 1,
            pad_token_id=vocab - 1,
        )
    )
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=in_channels,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(16, 32, 32),
        layers_per_block=2,
        transformer_layers_per_block=(1, 1, 2),
        attention_head_dim=(2, 4, 4),
        use_linear_projection=True,
        cross_attention_dim=32 + 48,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=24 + 6 * 8,
        norm_num_groups=8,
    )
    vae = tiny_vae(seed=seed)
    vae.register_to_config(scaling_factor=0.13025)
    scheduler = EulerDiscreteScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        prediction_type="epsilon",
        steps_offset=1,
        timestep_spacing="leading",
    )
    return {
        "tokenizer": tokenizer,
        "tokenizer_2": tokenizer_2,
        "text_encoder": text_encoder,
        "text_encoder_2": text_encoder_2,
        "vae": vae,
        "unet": unet,
        "scheduler": scheduler,
    }


def tiny_sdxl_pipeline(seed: int = 0):
    from diffusers import StableDiffusionXLPipeline

    return StableDiffusionXLPipeline(**tiny_sdxl_components(seed), add_watermarker=False)


def tiny_sdxl_inpainting_pipeline(seed: int = 0):
    from diffusers import StableDiffusionXLInpaintPipeline

    components = tiny_sdxl_components(seed, in_channels=4 + MASK_CHANNELS + 4)
    return StableDiffusionXLInpaintPipeline(**components, add_watermarker=False)


def _save_tiny(root: str | os.PathLike, name: str, build) -> TinyModelPaths:
    """The pipeline `build()` returns as a diffusers folder and `<name>.safetensors` in the
    original layout."""

    def write_single(path, pipe):
        save_sdxl_single_file(path, pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, metadata={"ot_gradio.tiny": name})

    return save_tiny(root, f"{name}.safetensors", build, write_single)


@register_tiny("sdxl", 1)
def save_tiny_sdxl(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    return _save_tiny(root, "sdxl", lambda: tiny_sdxl_pipeline(seed))


@register_tiny("sdxl-inpainting", 1)
def save_tiny_sdxl_inpainting(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    return _save_tiny(root, "sdxl-inpainting", lambda: tiny_sdxl_inpainting_pipeline(seed))
