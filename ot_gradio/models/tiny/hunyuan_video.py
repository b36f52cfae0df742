"""Tiny random HunyuanVideo (`tiny:hunyuan_video`): the real classes at a fraction of the width,
built in memory in well under a second and saved in the diffusers layout of
hunyuanvideo-community/HunyuanVideo (model_index.json names HunyuanVideoPipeline, LlamaModel,
LlamaTokenizerFast, CLIPTextModel, CLIPTokenizer, AutoencoderKLHunyuanVideo,
HunyuanVideoTransformer3DModel and FlowMatchEulerDiscreteScheduler at shift 7), so tests go
through the real loading code.

- Text encoder: a 3-layer LlamaModel (the pipeline reads its third-to-last hidden state) with a
  Llama 3 style byte-level BPE tokenizer (tokenizer.json, right padding, `<|begin_of_text|>`
  first, Llama 3's header tokens) whose vocabulary holds each word of the pipeline's prompt
  template, so the template before the prompt is 95 tokens, as with the real tokenizer, and the
  pipeline's crop_start of 95 drops exactly the template.
- Text encoder 2: a 2-layer CLIP text model with the byte-level CLIP tokenizer (tiny/sd15.py).
- Transformer: HunyuanVideoTransformer3DModel with guidance embedding, 1 double, 1 single and
  1 refiner block of 2 heads x 12, patch (1, 2, 2), 16 channels.
- VAE: AutoencoderKLHunyuanVideo at width 8, 16 latent channels, 4x in time and 8x per side,
  with the real scaling factor (its default).
"""

from __future__ import annotations

import os
import re

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny, seeded_model
from ot_gradio.models.tiny.flux import visible_output
from ot_gradio.models.tiny.sd15 import tiny_clip_text_model, tiny_clip_tokenizer

TINY_HUNYUAN_VIDEO_VERSION = 1
LLAMA_WIDTH = 32
CLIP_WIDTH = 32
# Llama 3's pre-tokenizer split (its tokenizer.json): "\n\n" before a word stays one piece
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                r"\s+(?!\S)|\s+")
LLAMA_SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")


def tiny_llama3_tokenizer(model_max_length: int = 351):
    """A byte-level BPE tokenizer trained here on the pipeline's prompt template (every template
    word one token; other words fall back to their bytes), with Llama 3's special tokens."""
    from diffusers.pipelines.hunyuan_video.pipeline_hunyuan_video import DEFAULT_PROMPT_TEMPLATE
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    texts = [t for t in re.split(r"<\|[a-z_]+\|>|\{\}", DEFAULT_PROMPT_TEMPLATE["template"]) if t]
    trainer = trainers.BpeTrainer(vocab_size=4000, min_frequency=1, special_tokens=list(LLAMA_SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(texts, trainer)
    bos = LLAMA_SPECIAL[0]
    backend.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, backend.token_to_id(bos))])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token="<|eot_id|>", pad_token="<|end_of_text|>",
                                   model_max_length=model_max_length, padding_side="right")


def tiny_llama_encoder(tokenizer, seed: int = 0):
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=LLAMA_WIDTH, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return seeded_model(LlamaModel, config, seed)


def tiny_hunyuan_video_transformer(seed: int = 0):
    from diffusers import HunyuanVideoTransformer3DModel

    torch.manual_seed(seed)
    transformer = HunyuanVideoTransformer3DModel(
        in_channels=16, out_channels=16, num_attention_heads=2, attention_head_dim=12, num_layers=1, num_single_layers=1,
        num_refiner_layers=1, mlp_ratio=2.0, patch_size=2, patch_size_t=1, guidance_embeds=True, text_embed_dim=LLAMA_WIDTH,
        pooled_projection_dim=CLIP_WIDTH, rope_axes_dim=(4, 4, 4),
    )
    visible_output(transformer.proj_out)
    return transformer


def tiny_hunyuan_video_vae(seed: int = 0):
    from diffusers import AutoencoderKLHunyuanVideo

    torch.manual_seed(seed)
    return AutoencoderKLHunyuanVideo(latent_channels=16, block_out_channels=(8, 8, 8, 8), layers_per_block=1, norm_num_groups=4)


def tiny_hunyuan_video_components(seed: int = 0) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    tokenizer = tiny_llama3_tokenizer()
    tokenizer_2 = tiny_clip_tokenizer()
    return {
        "tokenizer": tokenizer, "text_encoder": tiny_llama_encoder(tokenizer, seed),
        "tokenizer_2": tokenizer_2, "text_encoder_2": tiny_clip_text_model(len(tokenizer_2), CLIP_WIDTH, seed),
        "transformer": tiny_hunyuan_video_transformer(seed), "vae": tiny_hunyuan_video_vae(seed),
        "scheduler": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=7.0),
    }


def _hub_model_index(folder) -> None:
    """model_index.json as the hub repo has it (the tokenizer class is LlamaTokenizerFast there)."""
    import json

    path = folder / "model_index.json"
    index = json.loads(path.read_text())
    index["tokenizer"] = ["transformers", "LlamaTokenizerFast"]
    path.write_text(json.dumps(index, indent=2))


@register_tiny("hunyuan_video", TINY_HUNYUAN_VIDEO_VERSION)
def save_tiny_hunyuan_video(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny HunyuanVideo as a diffusers folder (no single file: it loads from folders here)."""
    from diffusers import HunyuanVideoPipeline

    return save_tiny(root, "no-single-file", lambda: HunyuanVideoPipeline(**tiny_hunyuan_video_components(seed)),
                     finish_folder=_hub_model_index)
