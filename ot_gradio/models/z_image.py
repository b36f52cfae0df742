"""Z-Image and Z-Image-Turbo: load, encode, predict, sample, save (a flow-matching family: the
shared core in training/flow_matching.py draws t, makes the noisy input and the target
`noise - latents`; this module maps t to the transformer and back).

What Z-Image is (diffusers' ZImagePipeline, OneTrainer's Z_IMAGE):
- One text encoder, Qwen3 (4B; `text_encoder`, a transformers Qwen3Model). Each prompt goes
  through the tokenizer's chat template as one user message with the generation prompt (and
  thinking on, so no empty think block), is padded to `text_encoder_sequence_length` tokens
  (blank: 512, the pipeline's `max_sequence_length`), and the second-to-last hidden state is
  taken (a layer skip goes further back). The transformer reads each prompt's embeddings WITHOUT
  its padding: a list of variable-length tensors. `encode_text` returns them padded to the
  window with zeros and a mask (`attention_mask`), so a batch and the text cache hold one tensor;
  `predict` cuts each prompt back to its own tokens, exactly what the pipeline feeds.
- ZImageTransformer2DModel (S3-DiT, single stream, patch 2) reads a list of latents of shape
  (C, 1, H, W) (a frame axis), the timestep as 1 - t (the fraction of signal) and predicts
  `latents - noise`: the pipeline steps with `-output`. So predict passes 1 - t and returns
  -output, the velocity of the contract.
- The VAE is Flux's (16 channels, shift and scaling factors); the scheduler FlowMatchEuler with
  shift 3 (Turbo: no dynamic shifting), whose config the core reads.
- Sampling: ZImagePipeline with our embeddings. The CFG scale is the pipeline's own
  `guidance_scale` (pred = pos + scale * (pos - neg); 0 turns CFG off, as Z-Image-Turbo is run);
  the negative prompt is used when it is on.
- Loading: a hub id, a diffusers folder, `tiny:z-image`, or the transformer file people download
  (`z_image_turbo_bf16.safetensors`, the original layout) through diffusers' `from_single_file`,
  with the text encoder, VAE and configs from a diffusers folder (the config folder) or the hub
  repo. Saving: a diffusers folder, or the transformer alone in the original layout
  (models/z_image_keys.py, which also places LoRA keys as ComfyUI does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import QWEN_PRESETS, base_module, compute_dtype, input_dtype, keep_embedders_unquantized, module_device
from ot_gradio.models.flow_family import FlowFamily, TokenWindow
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family

DEFAULT_SEQUENCE_LENGTH = 512


def transformer_presets(n_layers: int) -> dict[str, list[str]]:
    """OneTrainer's Z-Image presets: attention and feed-forward of the main layers, not the
    refiners (its `^(?=.*attention)(?!.*refiner).*` regexes), as plain name parts per layer."""
    attn = [f"layers.{i}.attention." for i in range(n_layers)]
    mlp = [f"layers.{i}.feed_forward." for i in range(n_layers)]
    return {"full": [], "attn-mlp": attn + mlp, "attn-only": attn, "blocks": ["layers."]}


@register_family(ModelType.Z_IMAGE)
class ZImage(TokenWindow, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Z-Image."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    comfy_lora_names = "z_image"  # LoRA layer names ComfyUI and diffusers read (models/comfy_lora_names.py)
    embedding_keys: dict[str, str] = {}  # no EMBEDDING method (as OneTrainer)
    single_file_layout = "original"  # the transformer file people download, through diffusers' converter
    default_sequence_length = DEFAULT_SEQUENCE_LENGTH
    default_steps, default_cfg_scale = 8, 0.0

    # ---------------------------------------------------------------- loading

    pipeline_class_name = "ZImagePipeline"
    transformer_class_name = "ZImageTransformer2DModel"

    # ---------------------------------------------------------------- parts and options

    @property
    def lora_layer_presets(self) -> dict[str, dict[str, list[str]]]:
        return {"transformer": transformer_presets(int(base_module(self.transformer).config.n_layers)), "text_encoder": QWEN_PRESETS}

    def configure_flow(self, config) -> None:
        """The run's token window (`text_encoder_sequence_length`); the embedders are kept out of
        the quantization that follows (keep_embedders_unquantized)."""
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)
        keep_embedders_unquantized(self.transformer)

    # ---------------------------------------------------------------- text

    def chat_prompts(self, texts: Sequence[str]) -> list[str]:
        """Each prompt as the pipeline renders it: one user message, the generation prompt, thinking on."""
        return [
            self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True, enable_thinking=True
            )
            for text in texts
        ]

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, width), zero past each prompt's tokens,
        "attention_mask": (B, window) bool}: the pipeline's per-prompt embeddings (hidden state
        -2 - skip, padding removed), padded back to the window so batches stack."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        encoder = self.text_encoder
        out = self.tokenizer(
            self.chat_prompts(texts), padding="max_length", max_length=self.text_encoder_sequence_length, truncation=True,
            return_tensors="pt",
        )
        device = module_device(encoder)
        ids, mask = out.input_ids.to(device), out.attention_mask.to(device).bool()
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            hidden = encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
            hidden = hidden[-(2 + self.layer_skips.get("text_encoder", 0))]
            hidden = hidden * mask.unsqueeze(-1).to(hidden.dtype)
        return {"encoder_hidden_states": hidden, "attention_mask": mask}

    @staticmethod
    def prompt_list(conditioning: Mapping, device=None, dtype=None) -> list[torch.Tensor]:
        """The pipeline's list of per-prompt embeddings (each cut to its own tokens)."""
        hidden, mask = conditioning["encoder_hidden_states"], conditioning["attention_mask"].bool()
        return [h[m.to(h.device)].to(device, dtype) for h, m in zip(hidden, mask, strict=True)]

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,): the transformer
        reads each sample as (C, 1, H, W) with timestep 1 - t and predicts latents - noise."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        b = noisy.shape[0]
        out = transformer(
            list(noisy.to(device, dtype).unsqueeze(2).unbind(0)),
            (1 - t.to(device, torch.float32)).expand(b),
            self.prompt_list(conditioning, device, dtype),
            return_dict=False,
        )[0]
        return -torch.stack(out).squeeze(2)

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        dtype = compute_dtype(self.transformer)
        inputs = {"prompt_embeds": self.prompt_list(self.encode_text([prompt]), dtype=dtype), "guidance_scale": float(cfg_scale)}
        if cfg_scale > 0:
            inputs["negative_prompt_embeds"] = self.prompt_list(self.encode_text([negative_prompt or ""]), dtype=dtype)
        return inputs

    def sample_options(self) -> dict:
        return {"max_sequence_length": self.text_encoder_sequence_length}

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in the original layout (ComfyUI's diffusion model loader and
        `from_single_file` read it); the text encoder and VAE are the base model's."""
        from ot_gradio.models.z_image_keys import save_original_transformer

        return save_original_transformer(path, *self.transformer_file_contents(dtype, "z-image", metadata))
