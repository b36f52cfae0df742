"""Würstchen 2: the prior (stage C, `WuerstchenPrior`) trained on EffNet latents, conditioned on
the last hidden states of the CLIP ViT-bigG text encoder (final layer norm applied).

The shared machinery is in cascade_common.py; this module gives Würstchen's networks, its latent
scaling ((x + 1) / 42, the prior pipeline's latent_mean and latent_std), its timestep mapping
(r = 1.08 t + 0.001) and its tiny test model (`tiny:wuerstchen2`).
Hub defaults: base `warp-ai/wuerstchen-prior`, decoder `warp-ai/wuerstchen`, EffNet
`warp-ai/EfficientNetEncoder`.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.cascade_common import CascadeFamily
from ot_gradio.models.cascade_loading import Loader, Source
from ot_gradio.models.common import base_module
from ot_gradio.models.registry import register_family

# OneTrainer trains the prior's attention layers ("attention"); the ResBlocks' channelwise
# Linear layers are its feed-forward part. Depthwise convolutions cannot take a LoRA of most
# ranks, so "full" is every other Linear and Conv2d.
LORA_PRESETS = {
    "full": ["projection", "mapper", "channelwise", "attention", "out.1"],
    "attn-mlp": ["attention", "kv_mapper", "channelwise"],
    "attn-only": ["attention"],
}


def diffusers_classes():
    from diffusers.pipelines.deprecated.wuerstchen import (
        PaellaVQModel,
        WuerstchenDecoderPipeline,
        WuerstchenDiffNeXt,
        WuerstchenPrior,
        WuerstchenPriorPipeline,
    )

    return WuerstchenPrior, WuerstchenDiffNeXt, PaellaVQModel, WuerstchenPriorPipeline, WuerstchenDecoderPipeline


@register_family(ModelType.WUERSTCHEN_2)
class Wuerstchen2(CascadeFamily):
    lora_base_model_version = "wuerstchen_v2"
    lora_layer_presets = {"prior": LORA_PRESETS}
    timestep_scale = 1.08
    decoder_steps = 12
    hub_example = prior_example = "warp-ai/wuerstchen-prior"
    family_name = "Würstchen"
    decoder_default = "warp-ai/wuerstchen"
    decoder_examples = "warp-ai/wuerstchen or a local copy of it"
    prior_pipeline_keys = ("latent_mean", "latent_std", "resolution_multiple")

    # ------------------------------------------------------------ loading

    @classmethod
    def default_effnet(cls, decoder: str, loader: Loader) -> str:
        return "warp-ai/EfficientNetEncoder"

    @classmethod
    def tiny_effnet_path(cls, root: Path) -> Path:
        return root / "effnet"

    @classmethod
    def network_classes(cls) -> tuple[type, type, type, type]:
        from transformers import CLIPTextModel

        prior_cls, decoder_cls, vqgan_cls = diffusers_classes()[:3]
        return CLIPTextModel, prior_cls, decoder_cls, vqgan_cls

    @classmethod
    def _decoder_text_parts(cls, decoder_source: Source, loader: Loader) -> dict:
        """Würstchen's decoder reads the prompt with a text encoder of its own."""
        from transformers import CLIPTextModel, CLIPTokenizer

        field = "decoder.model_name"
        return {
            "decoder_tokenizer": loader.load(CLIPTokenizer, decoder_source, "tokenizer", field),
            "decoder_text_encoder": loader.load(CLIPTextModel, decoder_source, "text_encoder", field),
        }

    # ------------------------------------------------------------ training

    @property
    def _latent_mean_std(self) -> tuple[float, float]:
        return float(self.prior_pipeline_config.get("latent_mean", 42.0)), float(self.prior_pipeline_config.get("latent_std", 1.0))

    def scale_latents(self, features: torch.Tensor) -> torch.Tensor:
        mean, std = self._latent_mean_std
        return (features + std) / mean

    def unscale_latents(self, latents: torch.Tensor) -> torch.Tensor:
        mean, std = self._latent_mean_std  # as the prior pipeline denormalises its output
        return latents * mean - std

    def _conditioning(self, text_encoder_output, layer_skip: int) -> dict[str, torch.Tensor]:
        """The last hidden states with the final layer norm (= last_hidden_state); clip skip takes an earlier layer."""
        if layer_skip <= 0:
            return {"prompt_embeds": text_encoder_output.last_hidden_state}
        base = base_module(self.text_encoder)
        final_norm = getattr(base, "final_layer_norm", None) or base.text_model.final_layer_norm
        return {"prompt_embeds": final_norm(text_encoder_output.hidden_states[-(layer_skip + 1)])}

    def _prior_forward(self, noisy, ratio, conditioning):
        return self.prior(noisy, r=ratio, c=conditioning["prompt_embeds"])

    # ------------------------------------------------------------ sampling

    @classmethod
    def pipeline_classes(cls) -> tuple[type, type]:
        classes = diffusers_classes()
        return classes[3], classes[4]

    def _prior_call_kwargs(self, cond, uncond):
        kwargs = {"prompt_embeds": cond["prompt_embeds"]}
        if uncond is not None:
            kwargs["negative_prompt_embeds"] = uncond["prompt_embeds"]
        return kwargs

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        raise ValueError(
            "output_model_format: Würstchen 2 has no single-file checkpoint format; save as DIFFUSERS (a prior folder)"
        )
