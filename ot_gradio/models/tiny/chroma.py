"""Tiny random Chroma (`tiny:chroma`): Chroma's classes with the other parts of tiny Flux."""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.flux import T5_WIDTH, tiny_flow_scheduler, tiny_flux_vae, tiny_t5_encoder, visible_output
from ot_gradio.models.tiny.pixart import tiny_t5_tokenizer

TINY_CHROMA_VERSION = 2  # 2: with the transformer file


def tiny_chroma_components(seed: int = 0) -> dict:
    """Chroma's classes at width 64 (the T5, VAE, tokenizer and scheduler of tiny Flux)."""
    from diffusers import ChromaTransformer2DModel

    tokenizer = tiny_t5_tokenizer(model_max_length=512)
    torch.manual_seed(seed)
    transformer = ChromaTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=32, num_attention_heads=2,
        joint_attention_dim=T5_WIDTH, axes_dims_rope=(8, 12, 12), approximator_num_channels=16, approximator_hidden_dim=64,
        approximator_layers=1,
    )
    visible_output(transformer.proj_out)
    scheduler = tiny_flow_scheduler()
    return {"tokenizer": tokenizer, "text_encoder": tiny_t5_encoder(tokenizer, seed), "vae": tiny_flux_vae(seed),
            "transformer": transformer, "scheduler": scheduler}


@register_tiny("chroma", TINY_CHROMA_VERSION)
def save_tiny_chroma(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Chroma as a diffusers folder and its transformer as Chroma's own single file."""
    from diffusers import ChromaPipeline

    from ot_gradio.models.flux_keys import save_bfl_transformer

    def write_single(path, pipe):
        t = pipe.transformer
        save_bfl_transformer(path, t, t.state_dict(), None, {"ot_gradio.tiny": "chroma"}, "Chroma")

    return save_tiny(root, "chroma-tiny-transformer.safetensors", lambda: ChromaPipeline(**tiny_chroma_components(seed)),
                     write_single)
