"""Tiny random Sana (`tiny:sana`): the real classes at a fraction of the width, built in memory in
well under a second and saved in the diffusers layout, so tests go through the real loading code.

- Text encoder: a 2-layer Gemma2 (transformers' Gemma2Model, as the real repo's `text_encoder`)
  with a Gemma tokenizer built here: a BPE over single characters with byte fallback, Gemma's
  special tokens (<pad> 0, <eos> 1, <bos> 2, <unk> 3) and a leading <bos>, as Gemma's does.
- Transformer: SanaTransformer2DModel (linear self-attention, cross-attention to the text, patch 1),
  2 layers, 32 latent channels.
- VAE: AutoencoderDC with six stages (32x compression) and 32 latent channels, Sana's
  scaling factor 0.41407; strided-conv downsampling and interpolating upsampling, as Sana's DC-AE.
- Scheduler: FlowMatchEulerDiscreteScheduler at shift 3 (the real repos ship DPM-Solver in flow
  mode with flow_shift 3; the Euler one lets tests compare our Euler steps with the pipeline's).
"""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, bpe_merges, register_tiny, save_tiny, seeded_model
from ot_gradio.models.tiny.flux import visible_output

TINY_SANA_VERSION = 1
GEMMA_WIDTH = 32
SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")
MERGES = (("▁", "a"), ("r", "e"), ("▁", "c"), ("i", "r"), ("e", "d"))


def tiny_gemma_tokenizer(model_max_length: int = 300):
    """A Gemma tokenizer: Gemma's specials, byte fallback, every printable ASCII character and a
    few merges; adds <bos> in front, pads on the right (the pipeline sets that side)."""
    from transformers import GemmaTokenizer

    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for c in ["▁", *(chr(i) for i in range(33, 127))]:
        vocab.setdefault(c, len(vocab))
    merges = bpe_merges(vocab, MERGES)
    tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, add_eos_token=False,
                               model_max_length=model_max_length)
    tokenizer.padding_side = "right"
    return tokenizer


def tiny_gemma2_encoder(vocab_size: int, pad_token_id: int, seed: int = 0):
    from transformers import Gemma2Config, Gemma2Model

    config = Gemma2Config(
        vocab_size=vocab_size, hidden_size=GEMMA_WIDTH, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=4096, pad_token_id=pad_token_id, bos_token_id=2,
        eos_token_id=1, sliding_window=4096,
    )
    return seeded_model(Gemma2Model, config, seed)


def tiny_sana_transformer(seed: int = 0):
    from diffusers import SanaTransformer2DModel

    torch.manual_seed(seed)
    transformer = SanaTransformer2DModel(
        in_channels=32, out_channels=32, num_attention_heads=2, attention_head_dim=16, num_layers=2,
        num_cross_attention_heads=2, cross_attention_head_dim=16, cross_attention_dim=32, caption_channels=GEMMA_WIDTH,
        mlp_ratio=2.5, sample_size=32, patch_size=1,
    )
    visible_output(transformer.proj_out)
    return transformer


def tiny_dc_autoencoder(seed: int = 0):
    from diffusers import AutoencoderDC

    torch.manual_seed(seed)
    return AutoencoderDC(
        in_channels=3, latent_channels=32, attention_head_dim=8, encoder_block_types="ResBlock", decoder_block_types="ResBlock",
        encoder_block_out_channels=(8, 8, 8, 16, 32, 32), decoder_block_out_channels=(8, 8, 8, 16, 32, 32),
        encoder_layers_per_block=(1, 1, 1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 1, 1, 1),
        encoder_qkv_multiscales=((),) * 6, decoder_qkv_multiscales=((),) * 6, upsample_block_type="interpolate",
        downsample_block_type="Conv", decoder_norm_types="rms_norm", decoder_act_fns="silu", scaling_factor=0.41407,
    )


def tiny_sana_components(seed: int = 0) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    tokenizer = tiny_gemma_tokenizer()
    text_encoder = tiny_gemma2_encoder(len(tokenizer), tokenizer.pad_token_id, seed)
    return {"tokenizer": tokenizer, "text_encoder": text_encoder, "transformer": tiny_sana_transformer(seed),
            "vae": tiny_dc_autoencoder(seed), "scheduler": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)}


@register_tiny("sana", TINY_SANA_VERSION)
def save_tiny_sana(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Sana as a diffusers folder (no single file: Sana loads from folders here)."""
    from diffusers import SanaPipeline

    return save_tiny(root, "no-single-file", lambda: SanaPipeline(**tiny_sana_components(seed)))
