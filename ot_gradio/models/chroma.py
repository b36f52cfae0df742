"""Chroma 1 (Lodestone Rock's Flux.1-schnell derivative): Flux's family (models/flux.py) with
what differs (OneTrainer's ChromaModel, diffusers' ChromaPipeline):
- One text encoder, T5 (`text_encoder`), read with its attention mask; its token window is the
  config's `text_encoder_sequence_length` (512 when blank). In the transformer every text token
  but the first padding one is masked, as the pipeline does.
- No pooled CLIP and no guidance embedding (the modulation comes from Chroma's approximator):
  samples use real classifier-free guidance with the negative prompt at the sample's CFG scale.
- Loading: a hub id (lodestones/Chroma1-HD), a diffusers folder, `tiny:chroma`, or Chroma's own
  transformer file (`Chroma1-HD.safetensors`: Flux's BFL names without the modulation layers, with
  the approximator as `distilled_guidance_layer`; models/flux_keys.py), its T5, VAE and
  configs from a diffusers folder or the hub repo. Saving: a diffusers folder, or that transformer
  file (ORIGINAL_TRANSFORMER, what OneTrainer's chroma-finetune preset writes and ComfyUI loads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import compute_dtype
from ot_gradio.models.flux import T5_PRESETS, TRANSFORMER_PRESETS, FluxDev1
from ot_gradio.models.registry import register_family


@register_family(ModelType.CHROMA_1)
class Chroma1(FluxDev1):
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16
    tokenizer_attrs = {"text_encoder": "tokenizer"}
    folder_parts = ("transformer", "text_encoder", "tokenizer", "vae", "scheduler")
    embedding_keys = {"text_encoder": "t5"}
    output_embedding_parts = ("text_encoder",)
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": T5_PRESETS}
    t5_part = "text_encoder"
    t5_length_option = "text_encoder_sequence_length"
    modelspec_architecture = "chroma"
    pipeline_class_name = "ChromaPipeline"
    transformer_class_name = "ChromaTransformer2DModel"

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Kohya renames: the approximator under its original names and T5 as `lora_te1_` (what
        ComfyUI maps for a T5-only model; models/comfy_lora_names.py)."""
        from ot_gradio.models.common import base_module
        from ot_gradio.models.key_layout import layer_paths
        from ot_gradio.models.lora_module_names import comfy_lora_module_names

        return comfy_lora_module_names("chroma", {p: layer_paths(base_module(getattr(self, p))) for p in ("transformer", "text_encoder")})

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": T5's sequence (read with its attention mask), "text_mask":
        the text tokens the transformer attends to (the words and the first padding token)}."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        ids, mask = self._tokens("text_encoder", texts, self.t5_sequence_length)
        hidden = self.t5_hidden_states("text_encoder", ids, mask, grad="text_encoder" in grad)
        device = hidden.device
        mask = mask.to(device)
        positions = torch.arange(mask.shape[1], device=device)[None, :]
        text_mask = positions <= mask.sum(dim=1, keepdim=True)
        return {"encoder_hidden_states": hidden, "text_mask": text_mask}

    def transformer_inputs(self, conditioning: Mapping, batch_size: int, image_tokens: int, device, dtype) -> dict:
        text_mask = conditioning["text_mask"].to(device, torch.bool)
        image = torch.ones(batch_size, image_tokens, device=device, dtype=torch.bool)
        return {"attention_mask": torch.cat([text_mask, image], dim=1)}

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Real CFG: the prompt's and the negative prompt's embeddings with their masks."""
        dtype = compute_dtype(self.transformer)
        cond, uncond = self.encode_text([prompt]), self.encode_text([negative_prompt or ""])
        return {
            "prompt_embeds": cond["encoder_hidden_states"].to(dtype),
            "prompt_attention_mask": cond["text_mask"],
            "negative_prompt_embeds": uncond["encoder_hidden_states"].to(dtype),
            "negative_prompt_attention_mask": uncond["text_mask"],
            "guidance_scale": float(cfg_scale),
            "max_sequence_length": self.t5_sequence_length,
        }
