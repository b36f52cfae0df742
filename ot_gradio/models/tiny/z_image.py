"""Tiny random Z-Image (`tiny:z-image`): the real classes at a fraction of the width, built in
memory in well under a second and saved in the diffusers layout (plus the transformer alone in
the original layout people download), so tests go through the real loading code.

- Text encoder: a 3-layer Qwen3 (transformers' Qwen3Model, as the real repo's `text_encoder`),
  with a Qwen2 byte-level BPE tokenizer built here (every byte a token, Qwen's special tokens) and
  a chat template that renders a single user message with the generation prompt as Qwen3's
  does: `<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n` (with
  `enable_thinking=False` Qwen3 adds an empty think block; the pipeline asks for thinking on).
- Transformer: ZImageTransformer2DModel, patch 2, 2 main layers and 1 refiner of each kind, 64 wide.
- VAE: Flux's 16-channel layout and factors (Z-Image ships the Flux VAE), models/tiny/flux.py's.
- Scheduler: Z-Image-Turbo's FlowMatchEulerDiscreteScheduler (shift 3, no dynamic shifting).
"""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, bpe_merges, register_tiny, save_tiny, seeded_model
from ot_gradio.models.tiny.flux import tiny_flux_vae, visible_output

TINY_Z_IMAGE_VERSION = 1
QWEN_WIDTH = 32
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
# Qwen3's template, for what the pipeline renders: messages, then the assistant turn; an empty
# think block only when thinking is turned off
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (what byte-level BPE vocabularies are spelt in)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tiny_qwen_tokenizer(model_max_length: int = 512):
    """A Qwen2 tokenizer: one token per byte plus a few merges, Qwen's special tokens (the
    padding token is `<|endoftext|>`, as Qwen3's) and Qwen3's chat template for one user turn."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab = {c: i for i, c in enumerate(byte_chars())}
    merges = bpe_merges(vocab, (("Ġ", "a"), ("e", "d"), ("i", "r"), ("c", "l"), ("Ġ", "c"), ("Ġc", "ir")))
    vocab["<|endoftext|>"] = len(vocab)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, model_max_length=model_max_length)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS[1:]], special_tokens=True)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_qwen3_encoder(vocab_size: int, pad_token_id: int, seed: int = 0):
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=QWEN_WIDTH, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=1024, pad_token_id=pad_token_id,
        tie_word_embeddings=True, rope_theta=1_000_000.0,
    )
    return seeded_model(Qwen3Model, config, seed)


def tiny_z_image_transformer(seed: int = 0):
    from diffusers import ZImageTransformer2DModel

    torch.manual_seed(seed)
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=64, n_layers=2, n_refiner_layers=1, n_heads=2,
        n_kv_heads=2, cap_feat_dim=QWEN_WIDTH, axes_dims=[8, 12, 12], axes_lens=[640, 128, 128],
    )
    visible_output(transformer.all_final_layer["2-1"].linear)
    return transformer


def tiny_z_image_components(seed: int = 0) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    tokenizer = tiny_qwen_tokenizer()
    text_encoder = tiny_qwen3_encoder(len(tokenizer), tokenizer.pad_token_id, seed)
    return {"tokenizer": tokenizer, "text_encoder": text_encoder, "transformer": tiny_z_image_transformer(seed),
            "vae": tiny_flux_vae(seed),
            "scheduler": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False)}


@register_tiny("z-image", TINY_Z_IMAGE_VERSION)
def save_tiny_z_image(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Z-Image as a diffusers folder and its transformer as an original-layout file."""
    from diffusers import ZImagePipeline

    from ot_gradio.models.z_image_keys import save_original_transformer

    def write_single(path, pipe):
        save_original_transformer(path, pipe.transformer.state_dict(), None, {"ot_gradio.tiny": "z-image"})

    return save_tiny(root, "z-image-tiny-transformer.safetensors", lambda: ZImagePipeline(**tiny_z_image_components(seed)),
                     write_single)
