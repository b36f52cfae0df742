"""Tiny random PixArt-α (`tiny:pixart`) and the in-memory T5 tokenizer the other T5 families'
tiny models share."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ot_gradio.models.pixart import DEFAULT_SEQUENCE_LENGTH
from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.sd15 import tiny_vae

TINY_PIXART_VERSION = 1


def tiny_t5_tokenizer(model_max_length: int = DEFAULT_SEQUENCE_LENGTH):
    """A T5 (Unigram) tokenizer built in memory: the special tokens, then every letter, digit and
    punctuation mark with and without the word-start mark, so text splits into characters."""
    from transformers import T5Tokenizer

    chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()-_/<>*"
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [("\u2581" + c, -3.0) for c in chars] + [(c, -4.0) for c in chars]
    return T5Tokenizer(vocab=vocab, extra_ids=0, model_max_length=model_max_length)


def tiny_pixart_components(seed: int = 0, sample_size: int = 128, **transformer_options) -> dict:
    """PixArt-α's classes at width 24-32 (the size embeddings need a width divisible by 3).
    sample_size 128 is the 1024-MS layout (micro-conditions on); 64 is the 512 model's. The
    position embedding is rebuilt for other sizes, so 64 px images work with either."""
    from diffusers import DPMSolverMultistepScheduler, PixArtTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    tokenizer = tiny_t5_tokenizer()
    torch.manual_seed(seed)
    text_encoder = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            relative_attention_num_buckets=8, feed_forward_proj="gated-gelu", dropout_rate=0.0,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )
    )
    torch.manual_seed(seed)
    transformer = PixArtTransformer2DModel(
        num_attention_heads=2, attention_head_dim=12, in_channels=4, out_channels=8, num_layers=2,
        cross_attention_dim=24, caption_channels=32, sample_size=sample_size, patch_size=2,
        norm_type="ada_norm_single", num_embeds_ada_norm=1000, norm_elementwise_affine=False, norm_eps=1e-6,
        activation_fn="gelu-approximate", attention_bias=True, **transformer_options,
    )
    with torch.no_grad():  # a visible output, so tests see what training changes
        transformer.proj_out.weight.normal_(0.0, 0.02)
    scheduler = DPMSolverMultistepScheduler(
        num_train_timesteps=1000, beta_start=0.0001, beta_end=0.02, beta_schedule="linear", prediction_type="epsilon",
        algorithm_type="dpmsolver++", solver_order=2,
    )
    return {"tokenizer": tokenizer, "text_encoder": text_encoder, "vae": tiny_vae(seed=seed), "transformer": transformer, "scheduler": scheduler}


def _as_hub_layout(folder: Path) -> None:
    """Name the transformer `Transformer2DModel`, as the hub's PixArt-α repos do (diffusers maps
    that name to PixArtTransformer2DModel by its norm type)."""
    import json

    for file, key in ((folder / "transformer" / "config.json", "_class_name"), (folder / "model_index.json", "transformer")):
        data = json.loads(file.read_text())
        data[key] = "Transformer2DModel" if key == "_class_name" else ["diffusers", "Transformer2DModel"]
        file.write_text(json.dumps(data, indent=2))


@register_tiny("pixart", TINY_PIXART_VERSION)
def save_tiny_pixart(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny PixArt-α (1024-MS layout) as a hub-like diffusers folder, and its transformer as
    an original-layout single file."""
    from diffusers import PixArtAlphaPipeline

    from ot_gradio.models.pixart_single_file import save_original_transformer

    def write_single(path, pipe):
        save_original_transformer(path, pipe.transformer, pipe.transformer.state_dict(), metadata={"ot_gradio.tiny": "pixart"})

    return save_tiny(root, "pixart-transformer.safetensors", lambda: PixArtAlphaPipeline(**tiny_pixart_components(seed)),
                     write_single, _as_hub_layout)
