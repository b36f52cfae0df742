"""Tiny random Flux.2 (`tiny:flux2-dev`, `tiny:flux2-klein`): the real classes at a fraction of
the width, built in memory in about a second and saved in the diffusers layout, so tests go
through the real loading code.

- dev: a Mistral3ForConditionalGeneration (30 text layers of width 16, as the pipeline stacks
  hidden states 10, 20 and 30; a one-layer Pixtral vision tower that text prompts never use)
  with a byte-level BPE tokenizer built here (the real repo has it inside a PixtralProcessor) (Mistral's control
  tokens, a chat template rendering `[SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]` for the
  content lists the pipeline passes); a transformer with the guidance embedder.
- Klein: a Qwen3ForCausalLM (27 layers: the pipeline stacks 9, 18 and 27) with tiny/z_image.py's
  Qwen tokenizer and chat template; a transformer without the guidance embedder.
- Both: Flux2Transformer2DModel (1 double and 1 single block, 2 heads of 16, input 4 x 8
  latent channels, joint width 3 x the text width) and AutoencoderKLFlux2 (8 latent channels,
  its batch norm over the 2x2 patches); the dev scheduler config (shift 3, dynamic shifting).
"""

from __future__ import annotations

import os

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.flux import visible_output

TINY_FLUX2_VERSION = 1
TEXT_WIDTH = 16
LATENT_CHANNELS = 8
MISTRAL_SPECIAL = ("<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[IMG]",
                   "[IMG_BREAK]", "[IMG_END]")
# Mistral Small 3.x's template, for the content lists the pipeline renders (text items only)
MISTRAL_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- set text = message['content'] if message['content'] is string else message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}"
    "{%- if message['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + text + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'user' %}{{- '[INST]' + text + '[/INST]' }}"
    "{%- else %}{{- text + eos_token }}{%- endif %}"
    "{%- endfor %}"
)


def tiny_mistral_tokenizer(model_max_length: int = 512):
    """A byte-level BPE tokenizer (one token per byte, Mistral's control tokens first, `<pad>`
    for padding) with Mistral's chat template. The real repo's `tokenizer` is a PixtralProcessor,
    which needs torchvision for its image processor; the pipeline only calls the processor's
    `apply_chat_template` on text, which the tokenizer itself answers the same way."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from ot_gradio.models.tiny.z_image import byte_chars

    vocab = {t: i for i, t in enumerate(MISTRAL_SPECIAL)}
    for c in byte_chars():
        vocab.setdefault(c, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        model_max_length=model_max_length, additional_special_tokens=list(MISTRAL_SPECIAL[4:]),
    )
    tokenizer.chat_template = MISTRAL_TEMPLATE
    return tokenizer


def tiny_mistral3_encoder(tokenizer, seed: int = 0, *, layers: int = 30, head: bool = True):
    """A Mistral3 with `layers` text layers: Mistral3ForConditionalGeneration (Flux.2 dev's) or,
    without `head`, the bare Mistral3Model (ERNIE-Image's)."""
    import transformers
    from transformers import Mistral3Config, MistralConfig, PixtralVisionConfig

    torch.manual_seed(seed)
    text = MistralConfig(
        vocab_size=len(tokenizer), hidden_size=TEXT_WIDTH, intermediate_size=32, num_hidden_layers=layers, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=1024, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    vision = PixtralVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, head_dim=8,
                                 image_size=64, patch_size=16)
    model_class = transformers.Mistral3ForConditionalGeneration if head else transformers.Mistral3Model
    return model_class(
        Mistral3Config(text_config=text, vision_config=vision, image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"),
                       spatial_merge_size=1, vision_feature_layer=-1)
    )


def tiny_qwen3_causal_lm(tokenizer, seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    return Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=len(tokenizer), hidden_size=TEXT_WIDTH, intermediate_size=32, num_hidden_layers=27, num_attention_heads=2,
            num_key_value_heads=1, head_dim=8, max_position_embeddings=1024, pad_token_id=tokenizer.pad_token_id,
            tie_word_embeddings=True, rope_theta=1_000_000.0,
        )
    )


def tiny_flux2_vae(seed: int = 0):
    from diffusers import AutoencoderKLFlux2

    torch.manual_seed(seed)
    vae = AutoencoderKLFlux2(
        block_out_channels=(8, 8, 16, 16), layers_per_block=1, latent_channels=LATENT_CHANNELS, norm_num_groups=4, sample_size=64,
    )
    with torch.no_grad():  # statistics as a trained VAE has them, so the normalisation is not the identity
        vae.bn.running_mean.normal_(0.0, 0.1)
        vae.bn.running_var.uniform_(0.5, 2.0)
    return vae


def tiny_flux2_transformer(guidance: bool, seed: int = 0):
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(seed)
    transformer = Flux2Transformer2DModel(
        in_channels=4 * LATENT_CHANNELS, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=3 * TEXT_WIDTH, timestep_guidance_channels=32, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=guidance,
    )
    visible_output(transformer.proj_out)
    return transformer


def tiny_flux2_components(variant: str, seed: int = 0) -> dict:
    from ot_gradio.models.tiny.flux import tiny_flow_scheduler
    from ot_gradio.models.tiny.z_image import tiny_qwen_tokenizer

    if variant == "dev":
        tokenizer = tiny_mistral_tokenizer()
        encoder = tiny_mistral3_encoder(tokenizer, seed)
    else:
        tokenizer = tiny_qwen_tokenizer()
        encoder = tiny_qwen3_causal_lm(tokenizer, seed)
    return {
        "tokenizer": tokenizer, "text_encoder": encoder, "transformer": tiny_flux2_transformer(variant == "dev", seed),
        "vae": tiny_flux2_vae(seed), "scheduler": tiny_flow_scheduler(),
    }


def _save(variant: str, root: str | os.PathLike, seed: int) -> TinyModelPaths:
    from diffusers import Flux2KleinPipeline, Flux2Pipeline

    pipeline = Flux2Pipeline if variant == "dev" else Flux2KleinPipeline
    # Flux.2 loads from diffusers folders only
    return save_tiny(root, "no-single-file.safetensors", lambda: pipeline(**tiny_flux2_components(variant, seed)))


@register_tiny("flux2-dev", TINY_FLUX2_VERSION)
def save_tiny_flux2_dev(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    return _save("dev", root, seed)


@register_tiny("flux2-klein", TINY_FLUX2_VERSION)
def save_tiny_flux2_klein(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    return _save("klein", root, seed)
