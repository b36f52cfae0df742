"""Tiny random Anima (`tiny:anima`): the real classes at a fraction of the width, built in memory
in well under a second and saved in the hub repo's modular layout (circlestone-labs/
Anima-Base-v1.0-Diffusers: modular_model_index.json and the subfolders tokenizer, t5_tokenizer,
text_encoder, text_conditioner, transformer, vae, scheduler), so tests go through the real loading code.

- Text encoder: Z-Image's tiny Qwen3 and byte-level Qwen2 tokenizer (models/tiny/z_image.py).
- Text conditioner: AnimaTextConditioner, one block, reading the Qwen3 states with the T5 tokens
  of the tiny T5 tokenizer (models/tiny/pixart.py) as queries, padded to 512 tokens as the real one.
- Transformer: CosmosTransformer3DModel in Anima's layout (no learnable position embedding,
  rope scale (1, 4, 4), padding mask concatenated), 2 blocks of width 48.
- VAE: Qwen-Image's tiny AutoencoderKLQwenImage (models/tiny/qwen_image.py).
- Scheduler: FlowMatchEuler with Anima's shift 3.
"""

from __future__ import annotations

import json
import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.flux import visible_output
from ot_gradio.models.tiny.pixart import tiny_t5_tokenizer
from ot_gradio.models.tiny.qwen_image import tiny_qwen_image_vae
from ot_gradio.models.tiny.z_image import QWEN_WIDTH, tiny_qwen3_encoder, tiny_qwen_tokenizer

TINY_ANIMA_VERSION = 2
TEXT_WIDTH = 32  # the conditioner's output and the transformer's text_embed_dim (real: 1024)


def tiny_anima_transformer(seed: int = 0):
    from diffusers import CosmosTransformer3DModel

    torch.manual_seed(seed)
    transformer = CosmosTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=24, num_layers=2, mlp_ratio=2.0,
        text_embed_dim=TEXT_WIDTH, adaln_lora_dim=8, max_size=(4, 64, 64), patch_size=(1, 2, 2), rope_scale=(1.0, 4.0, 4.0),
        concat_padding_mask=True, extra_pos_embed_type=None,
    )
    visible_output(transformer.proj_out)
    return transformer


def tiny_anima_conditioner(vocab_size: int, seed: int = 0):
    from diffusers import AnimaTextConditioner

    torch.manual_seed(seed)
    return AnimaTextConditioner(
        source_dim=QWEN_WIDTH, target_dim=TEXT_WIDTH, model_dim=TEXT_WIDTH, num_layers=1, num_attention_heads=2,
        mlp_ratio=2.0, target_vocab_size=vocab_size,
    )


def tiny_anima_components(seed: int = 0) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    tokenizer, t5_tokenizer = tiny_qwen_tokenizer(), tiny_t5_tokenizer()
    return {
        "tokenizer": tokenizer, "t5_tokenizer": t5_tokenizer,
        "text_encoder": tiny_qwen3_encoder(len(tokenizer), tokenizer.pad_token_id, seed),
        "text_conditioner": tiny_anima_conditioner(len(t5_tokenizer), seed),
        "transformer": tiny_anima_transformer(seed), "vae": tiny_qwen_image_vae(seed),
        "scheduler": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0),
    }


def tiny_anima_pipeline(seed: int = 0):
    """diffusers' modular Anima pipeline (AnimaAutoBlocks) holding the tiny parts."""
    from diffusers import AnimaAutoBlocks

    pipe = AnimaAutoBlocks().init_pipeline()
    pipe.update_components(**tiny_anima_components(seed))
    return pipe


@register_tiny("anima", TINY_ANIMA_VERSION)
def save_tiny_anima(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Anima as a modular diffusers folder, its modular_model_index.json naming the folder
    (diffusers writes the temporary one it saved in), and as the original checkpoint (DiT and adapter under `net.`)."""
    from pathlib import Path

    final = Path(root) / "diffusers"

    def repoint(folder: Path) -> None:
        index_file = folder / "modular_model_index.json"
        index = json.loads(index_file.read_text(encoding="utf-8"))
        for entry in index.values():
            if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], dict):
                entry[2]["pretrained_model_name_or_path"] = str(final.resolve())
        index_file.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")

    def write_single(path: Path, pipe) -> None:
        from ot_gradio.models.anima import Anima

        Anima(pipe.components).save_single_file(path, None, {"ot_gradio.tiny": "anima"})

    return save_tiny(root, "anima-tiny-transformer.safetensors", lambda: tiny_anima_pipeline(seed), write_single,
                     finish_folder=repoint, index_file="modular_model_index.json")
