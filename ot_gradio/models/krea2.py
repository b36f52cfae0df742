"""Krea 2: load, encode, predict, sample, save (a flow-matching family on the shared core: the
trainer's flow core draws t and the target `noise - latents`; this module feeds the transformer).

What Krea 2 is (diffusers' Krea2Pipeline, OneTrainer's KREA_2):
- One text encoder, Qwen3-VL (4B; `text_encoder`, transformers' Qwen3VLModel; its vision tower
  is not used for prompts). Each prompt is put after the pipeline's system prefix, padded to a
  fixed block, and the assistant suffix is appended AFTER the padding; positions count real
  tokens only. The hidden states of several layers (`text_encoder_select_layers` in the
  pipeline's config: 12 of the real model's) are stacked per token, (B, T, layers, width), and
  the prefix's 34 tokens are dropped. `encode_text` keeps each prompt's real tokens (its words
  and the suffix) first, zero after them, in a window of `text_encoder_sequence_length` tokens
  (blank: 512, the pipeline's `max_sequence_length`), as OneTrainer prunes them: the
  transformer's text tokens all sit at rotary position 0 and padding is masked out of every
  attention, so the pipeline's padded block and the pruned one give the same image.
- Krea2Transformer2DModel: a text fusion stage (attention across the stacked layers, a projector,
  refiner blocks), then a single-stream DiT over [text, image] tokens; the latents are packed in
  2x2 patches, the timestep is t itself and the output the velocity `noise - latents`.
- The VAE is Qwen-Image's (AutoencoderKLQwenImage, one frame; flow_family.WanImageLatents).
- The scheduler is FlowMatchEuler with dynamic shifting from the token count (base 0.5, max
  1.15). Sampling CFG is the pipeline's: pos + scale * (pos - neg), on above 0.
- Loading: a hub id, a diffusers folder, `tiny:krea2`, or the native transformer file
  (`raw.safetensors`, which diffusers' `from_single_file` converts) with the other parts from a
  diffusers folder or the hub repo. Saving: a diffusers folder, or the transformer alone in the
  native layout (models/krea2_keys.py). LoRA: the transformer only, diffusers' names (the
  pipeline's load_lora_weights reads no text encoder; ComfyUI has no Krea 2 model).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import (
    compute_dtype,
    input_dtype,
    keep_embedders_unquantized,
    language_model_config,
    module_device,
    vl_language_model_presets,
)
from ot_gradio.models.flow_family import (
    FlowFamily,
    TokenWindow,
    WanImageLatents,
    pack_latents,
    trim_to_longest,
    unpack_latents,
)
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family

# Krea2Pipeline's prompt template, prefix length and suffix length, and its default layer taps
PREFIX = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n"
)
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
PREFIX_TOKENS, SUFFIX_TOKENS = 34, 5
SELECT_LAYERS = (2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35)
# OneTrainer's BaseKrea2Setup layer presets for the transformer
TRANSFORMER_PRESETS = {"full": [], "attn-mlp": ["attn", "ff"], "attn-only": ["attn"], "blocks": ["transformer_blocks"]}


@register_family(ModelType.KREA_2)
class Krea2(WanImageLatents, TokenWindow, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Krea 2."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    single_file_layout = "original"  # the native raw.safetensors, through diffusers' converter
    default_sequence_length = 512
    default_steps, default_cfg_scale = 28, 4.5
    pipeline_config_keys = ("text_encoder_select_layers", "is_distilled", "patch_size")

    pipeline_class_name = "Krea2Pipeline"
    transformer_class_name = "Krea2Transformer2DModel"

    # ---------------------------------------------------------------- parts and options

    @property
    def select_layers(self) -> tuple[int, ...]:
        """The text encoder's hidden states the transformer reads (the pipeline's config)."""
        return tuple(self.pipeline_config.get("text_encoder_select_layers") or SELECT_LAYERS)

    @property
    def lora_layer_presets(self) -> dict[str, dict[str, list[str]]]:
        layers = int(language_model_config(self.text_encoder).num_hidden_layers)
        return {"transformer": TRANSFORMER_PRESETS, "text_encoder": vl_language_model_presets(layers)}

    def _check_layer_skip(self, part: str, skip: int) -> None:
        if skip:
            raise ValueError(f"{part}_layer_skip: Krea 2 reads fixed layers of its text encoder "
                             f"({', '.join(map(str, self.select_layers))}); set the layer skip to 0")

    def configure_flow(self, config) -> None:
        """The run's token window; the timestep embedder stays out of the quantization that follows."""
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)
        keep_embedders_unquantized(self.transformer)

    # ---------------------------------------------------------------- text

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, layers, width), "attention_mask": (B, window)
        bool}: the pipeline's stacked hidden states of each prompt's real tokens (words, then
        the suffix), first in the window, zero after them."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        window = self.text_encoder_sequence_length
        block = self.tokenizer([PREFIX + text for text in texts], truncation=True, padding="max_length",
                               max_length=window + PREFIX_TOKENS - SUFFIX_TOKENS, padding_side="right", return_tensors="pt")
        suffix = self.tokenizer([SUFFIX] * len(texts), return_tensors="pt")
        device = module_device(self.text_encoder)
        ids = torch.cat([block.input_ids, suffix.input_ids], dim=1).to(device)
        mask = torch.cat([block.attention_mask, suffix.attention_mask], dim=1).to(device).bool()
        positions = (mask.long().cumsum(dim=-1) - 1).clamp(min=0).unsqueeze(0).expand(3, -1, -1)
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            out = self.text_encoder(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True)
            hidden = torch.stack([out.hidden_states[i] for i in self.select_layers], dim=2)[:, PREFIX_TOKENS:]
        mask = mask[:, PREFIX_TOKENS:]
        order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices  # real tokens first, in order
        hidden = torch.gather(hidden, 1, order[:, :, None, None].expand_as(hidden))
        kept = torch.arange(mask.shape[1], device=device)[None, :] < mask.sum(dim=1, keepdim=True)
        return {"encoder_hidden_states": hidden * kept[:, :, None, None].to(hidden.dtype), "attention_mask": kept}

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,)."""
        from diffusers import Krea2Pipeline

        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        b, _, h, w = noisy.shape
        hidden, mask = trim_to_longest(conditioning, device, dtype)
        out = transformer(
            hidden_states=pack_latents(noisy.to(device, dtype)),
            encoder_hidden_states=hidden,
            timestep=t.to(device, dtype).expand(b),
            position_ids=Krea2Pipeline.prepare_position_ids(hidden.shape[1], h // 2, w // 2, device),
            encoder_attention_mask=None if mask is None else mask.bool(),
            return_dict=False,
        )[0]
        return unpack_latents(out, h, w)

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """The prompt's embeddings and the pipeline's CFG (on above 0, with the negative prompt's,
        of the same length: the pipeline places both by the prompt's token count)."""
        texts = [prompt, negative_prompt or ""] if cfg_scale > 0 else [prompt]
        hidden, mask = trim_to_longest(self.encode_text(texts), dtype=compute_dtype(self.transformer), keep_mask=True)
        inputs = {"prompt_embeds": hidden[:1], "prompt_embeds_mask": mask[:1].bool(), "guidance_scale": float(cfg_scale)}
        if cfg_scale > 0:
            inputs.update(negative_prompt_embeds=hidden[1:], negative_prompt_embeds_mask=mask[1:].bool())
        return inputs

    def sample_options(self) -> dict:
        return {"max_sequence_length": self.text_encoder_sequence_length}

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in the native layout (`from_single_file` reads it); the text
        encoder and VAE are the base model's."""
        from ot_gradio.models.krea2_keys import save_native_transformer

        return save_native_transformer(path, *self.transformer_file_contents(dtype, "krea2", metadata))
