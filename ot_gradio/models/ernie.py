"""ERNIE-Image: load, encode, predict, sample, save (a flow-matching family: the shared core in
training/flow_matching.py draws t, makes the noisy input and the target `noise - latents`; this
module maps t to the transformer and back).

What ERNIE-Image is (Baidu's; diffusers' ErnieImagePipeline, OneTrainer's ERNIE):
- One text encoder, a Mistral3Model (Ministral 3B's, `text_encoder`). Each prompt is tokenized
  as it is (no chat template, the tokenizer's BOS) up to `text_encoder_sequence_length` tokens
  (blank: 512, OneTrainer's) and its second-to-last hidden state taken (a layer skip goes further
  back). The pipeline encodes each prompt alone and pads a batch with zeros, passing the lengths;
  `encode_text` pads to the window with zeros and a mask (`attention_mask`) so the text cache
  holds one tensor, and `predict` cuts the batch to its longest prompt: what the pipeline feeds.
- The prompt enhancer (`pe`, a Ministral3ForCausalLM that rewrites prompts at sampling) is not
  trained and not loaded: samples use the prompts as written, as OneTrainer's.
- ErnieImageTransformer2DModel (single stream, patch 1 over the patchified latents) reads the
  timestep as t * 1000 and predicts the velocity `noise - latents`.
- The VAE is Flux.2's (AutoencoderKLFlux2): latents cut into 2x2 patches and normalised by its
  batch norm (family_parts.Flux2VaeLatents), with the epsilon the pipeline decodes with (1e-5).
- Loading: a hub id, a diffusers folder, `tiny:ernie`, or a transformer file (diffusers' names,
  bare or under `model.diffusion_model.` as ComfyUI's files have them; diffusers' from_single_file)
  with the other parts from a diffusers folder (the config folder) or the hub repo. Saving: a
  diffusers folder, or the transformer alone under diffusers' names, as OneTrainer writes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import cast_state_dict, compute_dtype, input_dtype, module_device
from ot_gradio.models.family_parts import Flux2VaeLatents
from ot_gradio.models.flow_family import FlowFamily, TokenWindow
from ot_gradio.models.key_layout import save_tensors
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family

# OneTrainer's ERNIE layer presets (BaseErnieSetup.LAYER_PRESETS)
TRANSFORMER_PRESETS = {"full": [], "attn-mlp": ["self_attention", "mlp"], "attn-only": ["self_attention"], "blocks": ["layers"]}


@register_family(ModelType.ERNIE)
class Ernie(Flux2VaeLatents, TokenWindow, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for ERNIE-Image."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    single_file_layout = "original"  # diffusers' names, through diffusers' from_single_file
    patch_size = 1  # the latents are patchified already (128 channels at 1/16)
    bn_eps = 1e-5  # ErnieImagePipeline denormalises with 1e-5, not the VAE config's value
    default_sequence_length = 512  # OneTrainer's PROMPT_MAX_LENGTH
    default_steps, default_cfg_scale = 50, 4.0  # the model card's
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS}

    pipeline_class_name = "ErnieImagePipeline"
    transformer_class_name = "ErnieImageTransformer2DModel"

    @classmethod
    def _pipeline_from(cls, source, dtype, hub: Mapping, **parts):
        """The pipeline without its prompt enhancer (a 3B language model sampling never uses here)."""
        return super()._pipeline_from(source, dtype, hub, pe=None, pe_tokenizer=None, **parts)

    @property
    def vae_id(self) -> str:
        """ERNIE's latents differ from Flux.2's with the same VAE (the normalisation's epsilon)."""
        return "ernie-" + super().vae_id

    def configure_flow(self, config) -> None:
        """The run's token window; the text encoder stays frozen, as in OneTrainer (the pipeline's
        LoRA loader reads transformer keys only)."""
        if config.text_encoder.train:
            raise ValueError("text_encoder.train: ERNIE-Image trains the transformer only (as OneTrainer; ErnieImagePipeline "
                             "loads transformer LoRAs only); turn it off")
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)

    # ---------------------------------------------------------------- text

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, width), zero past each prompt's tokens,
        "attention_mask": (B, window) bool}: the pipeline's per-prompt embeddings (hidden state
        -2 - skip), padded to the window so batches stack."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        encoder = self.text_encoder
        out = self.tokenizer(texts, padding="max_length", max_length=self.text_encoder_sequence_length, truncation=True,
                             add_special_tokens=True, return_tensors="pt")
        device = module_device(encoder)
        ids, mask = out.input_ids.to(device), out.attention_mask.to(device).bool()
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            hidden = encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False).hidden_states
            hidden = hidden[-(2 + self.layer_skips.get("text_encoder", 0))]
            hidden = hidden * mask.unsqueeze(-1).to(hidden.dtype)
        return {"encoder_hidden_states": hidden, "attention_mask": mask}

    @staticmethod
    def text_batch(conditioning: Mapping, device=None, dtype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(text_bth, text_lens) as the pipeline's `_pad_text` makes them: cut to the longest prompt."""
        hidden, mask = conditioning["encoder_hidden_states"], conditioning["attention_mask"].bool()
        lens = mask.sum(dim=1).long()
        return hidden[:, : int(lens.max())].to(device, dtype), lens.to(device)

    @staticmethod
    def prompt_list(conditioning: Mapping, dtype=None) -> list[torch.Tensor]:
        """The pipeline's `prompt_embeds`: one (tokens, width) tensor per prompt."""
        hidden, mask = conditioning["encoder_hidden_states"], conditioning["attention_mask"].bool()
        return [h[m.to(h.device)].to(dtype=dtype) for h, m in zip(hidden, mask, strict=True)]

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, 128, h, w) for noisy latents at noise fraction `t` (B,)."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        text, lens = self.text_batch(conditioning, device, dtype)
        b = noisy.shape[0]
        return transformer(
            hidden_states=noisy.to(device, dtype), timestep=(t.to(device, torch.float32) * 1000).expand(b).to(dtype),
            text_bth=text, text_lens=lens, return_dict=False,
        )[0]

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Our embeddings, the CFG scale and, with CFG on (> 1), the negative prompt's."""
        dtype = compute_dtype(self.transformer)
        inputs = {"prompt_embeds": self.prompt_list(self.encode_text([prompt]), dtype), "guidance_scale": float(cfg_scale)}
        if cfg_scale > 1:
            inputs["negative_prompt_embeds"] = self.prompt_list(self.encode_text([negative_prompt or ""]), dtype)
        return inputs

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone under diffusers' names (OneTrainer's ORIGINAL_TRANSFORMER file;
        from_single_file reads it back); the text encoder and VAE are the base model's."""
        weights, dtype, header = self.transformer_file_contents(dtype, "ernie-image", metadata)
        return save_tensors(path, cast_state_dict(weights, dtype), header)
