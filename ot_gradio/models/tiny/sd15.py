"""Tiny random Stable Diffusion 1.5 and 2 parts (CLIP tokenizer and text model, VAE, UNet,
scheduler), shared by the other UNet families' tiny models."""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny

TINY_SD15_VERSION = 1  # bump when the tiny SD 1.5 changes, so cached copies are rebuilt


def _bytes_to_unicode() -> list[str]:
    """The byte -> printable character table CLIP's byte-level BPE uses."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def tiny_clip_tokenizer(model_max_length: int = 77):
    """A CLIP tokenizer whose vocabulary is the 256 byte symbols (with and without the
    end-of-word mark) and no merges: every character is one token."""
    from transformers import CLIPTokenizer

    symbols = _bytes_to_unicode()
    vocab: dict[str, int] = {}
    for s in symbols:
        vocab[s] = len(vocab)
    for s in symbols:
        vocab[s + "</w>"] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=model_max_length)


def tiny_clip_text_model(vocab_size: int, hidden: int = 32, seed: int = 0, hidden_act: str = "quick_gelu"):
    """OpenAI CLIP (SD 1.x) uses quick_gelu; OpenCLIP (SD 2.x) uses gelu."""
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(seed)
    cfg = CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=77,
        hidden_act=hidden_act,
        bos_token_id=vocab_size - 2,
        eos_token_id=vocab_size - 1,
        pad_token_id=vocab_size - 1,
    )
    return CLIPTextModel(cfg)


def tiny_vae(seed: int = 0):
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 16, 16),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=64,
        scaling_factor=0.18215,
    )


def tiny_sd15_unet(cross_attention_dim: int = 32, seed: int = 0):
    """An SD 1.5-shaped UNet (same block types, two layers per block) at width 16-32."""
    from diffusers import UNet2DConditionModel

    torch.manual_seed(seed)
    return UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(16, 16, 32, 32),
        layers_per_block=2,
        cross_attention_dim=cross_attention_dim,
        attention_head_dim=8,
        norm_num_groups=8,
    )


def tiny_sd15_scheduler():
    """The DDPM schedule SD 1.5 trains with (scaled linear betas, 1000 steps, epsilon)."""
    from diffusers import DDPMScheduler

    return DDPMScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        prediction_type="epsilon",
        steps_offset=1,
    )


def tiny_sd15_components(seed: int = 0) -> dict:
    tokenizer = tiny_clip_tokenizer()
    return {
        "tokenizer": tokenizer,
        "text_encoder": tiny_clip_text_model(len(tokenizer), seed=seed),
        "vae": tiny_vae(seed=seed),
        "unet": tiny_sd15_unet(seed=seed),
        "scheduler": tiny_sd15_scheduler(),
    }


def tiny_sd15_pipeline(seed: int = 0):
    from diffusers import StableDiffusionPipeline

    return StableDiffusionPipeline(**tiny_sd15_components(seed), safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def tiny_sd2_components(seed: int = 0) -> dict:
    """SD 2.x's differences at tiny size: an OpenCLIP-style text encoder (gelu), linear
    projections in the UNet's transformers, per-block head counts and v-prediction."""
    from diffusers import UNet2DConditionModel

    tokenizer = tiny_clip_tokenizer()
    text_encoder = tiny_clip_text_model(len(tokenizer), seed=seed, hidden_act="gelu")
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=8,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(16, 16, 32, 32),
        layers_per_block=2,
        cross_attention_dim=32,
        attention_head_dim=(2, 2, 4, 4),
        use_linear_projection=True,
        norm_num_groups=8,
    )
    scheduler = tiny_sd15_scheduler()
    scheduler.register_to_config(prediction_type="v_prediction")
    return {"tokenizer": tokenizer, "text_encoder": text_encoder, "vae": tiny_vae(seed=seed), "unet": unet, "scheduler": scheduler}


@register_tiny("sd15", TINY_SD15_VERSION)
def save_tiny_sd15(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny SD 1.5 as a diffusers folder and as an original-layout single file."""
    return save_unet_pipeline(root, "sd15", lambda: tiny_sd15_pipeline(seed))


def save_unet_pipeline(root: str | os.PathLike, name: str, build) -> TinyModelPaths:
    """The SD 1.5 / 2 pipeline `build()` returns as a diffusers folder and `<name>.safetensors`
    in the original layout."""
    from ot_gradio.models.sd_single_file import save_original_single_file

    def write_single(path, pipe):
        save_original_single_file(path, pipe.unet, pipe.vae, pipe.text_encoder, metadata={"ot_gradio.tiny": name})

    return save_tiny(root, f"{name}.safetensors", build, write_single)
