"""Flux.2 dev and Flux.2 Klein: load, encode, predict, sample, save (a flow-matching family: the
shared core in training/flow_matching.py draws t, makes the noisy input and the target
`noise - latents`; this module maps t to the transformer and back).

What Flux.2 is (OneTrainer's one FLUX_2 model type; diffusers' Flux2Pipeline and
Flux2KleinPipeline):
- dev and Klein share the transformer (Flux2Transformer2DModel), the VAE (AutoencoderKLFlux2)
  and the latent handling; they differ in the text encoder and the guidance embedding. OneTrainer
  tells them apart by the transformer's 48 heads (dev); here the text encoder's class decides
  (Mistral3ForConditionalGeneration: dev, Qwen3ForCausalLM: Klein), which agrees on the real
  models and also holds for the tiny ones.
- Text: dev renders each prompt with the pipeline's system message as Mistral's chat (no
  generation prompt), Klein as one Qwen3 user turn with the generation prompt and thinking off;
  both pad to `text_encoder_sequence_length` tokens (blank: 512, the pipelines') and stack three
  hidden states into the width (dev 10, 20, 30; Klein 9, 18, 27). The encoding is the
  pipelines' own (their `_get_*_prompt_embeds`), so training sees exactly what sampling sees;
  padding is not masked (the transformer takes no mask). Text ids are (0, 0, 0, token).
- Latents: the VAE's 32-channel latents are cut into 2x2 patches (128 channels at 1/16 of the
  image side) and normalised by the VAE's batch-norm statistics; `encode_images` returns them so,
  `predict` packs them into a token sequence with (0, row, column, 0) ids.
- The transformer reads t itself (the pipelines pass timestep / 1000) and predicts the velocity.
  dev has a guidance embedding: training feeds `transformer.guidance_scale`, sampling the CFG
  value; Klein has none and samples with real CFG (negative prompt) unless distilled.
- Loading: a hub id, a diffusers folder, `tiny:flux2-dev` / `tiny:flux2-klein`, or a BFL-layout
  transformer file (diffusers' from_single_file) with the other parts from a diffusers folder
  (the config folder) or the dev repo, as OneTrainer's transformer override does. The text
  encoder may come from a file of its own (ComfyUI's mistral_3_small_flux2 or qwen_3_4b / qwen_3_8b,
  models/text_encoder_file.py; the pruned 30-layer Mistral too). Saving: a diffusers folder, or the transformer alone in the BFL layout (models/flux2_keys.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import ModelLoadError, base_module, compute_dtype, input_dtype, module_device, module_dtype
from ot_gradio.models.family_parts import Flux2VaeLatents
from ot_gradio.models.flow_family import FlowFamily, TokenWindow
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family

DEFAULT_SEQUENCE_LENGTH = 512
HIDDEN_LAYERS = {"dev": (10, 20, 30), "klein": (9, 18, 27)}
TEXT_ENCODERS = {"Mistral3ForConditionalGeneration": "dev", "Qwen3ForCausalLM": "klein"}
# OneTrainer's Flux.2 layer presets
TRANSFORMER_PRESETS = {
    "full": [], "attn-mlp": ["attn", "ff.linear", "ff_context.linear"], "attn-only": ["attn"], "blocks": ["transformer_block"],
}
LLM_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"], "blocks": ["layers."]}


def latent_ids(latents: torch.Tensor) -> torch.Tensor:
    """(B, H*W, 4): (0, row, column, 0) of each patch token, as the pipelines build them."""
    b, _, h, w = latents.shape
    ids = torch.cartesian_prod(torch.arange(1), torch.arange(h), torch.arange(w), torch.arange(1))
    return ids.to(latents.device).unsqueeze(0).expand(b, -1, -1)


def text_ids(hidden: torch.Tensor) -> torch.Tensor:
    """(B, L, 4): (0, 0, 0, token index) of each text token."""
    b, length, _ = hidden.shape
    ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(length))
    return ids.to(hidden.device).unsqueeze(0).expand(b, -1, -1)


@register_family(ModelType.FLUX_2)
class Flux2(Flux2VaeLatents, TokenWindow, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Flux.2 dev and Klein."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    text_encoder_description = "its Mistral3 (dev) or Qwen3 (Klein) text encoder"
    comfy_lora_names = "flux2"  # layers ComfyUI's Flux map lacks, by original name (models/comfy_lora_names.py)
    single_file_layout = "bfl"  # BFL-layout transformer files, through diffusers' converter
    patch_size = 1  # the latents are patchified already (128 channels at 1/16)
    default_sequence_length = DEFAULT_SEQUENCE_LENGTH  # the pipelines' window, system message included
    default_steps, default_cfg_scale = 28, 4.0
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": LLM_PRESETS}
    # ComfyUI's pruned Mistral (30 of 40 layers) holds all that dev's encoding reads
    text_encoder_layers_read = {name: max(HIDDEN_LAYERS[variant]) for name, variant in TEXT_ENCODERS.items()}

    def __init__(self, components: Mapping, is_distilled: bool = False):
        super().__init__(components)
        variant = TEXT_ENCODERS.get(type(base_module(self.text_encoder)).__name__)
        if variant is None:
            raise ModelLoadError(f"The text encoder is a {type(self.text_encoder).__name__}; Flux.2 dev uses "
                                 "Mistral3ForConditionalGeneration and Klein Qwen3ForCausalLM. Pick a Flux.2 model.")
        self.variant = variant
        self.is_distilled = bool(is_distilled)
        self.guidance_scale = 1.0

    # ---------------------------------------------------------------- loading

    pipeline_class_name = "DiffusionPipeline"  # loading reads the pipeline class (dev or Klein) from the model's model_index.json
    transformer_class_name = "Flux2Transformer2DModel"

    @classmethod
    def _from_pipeline(cls, pipe):
        return cls(pipe.components, is_distilled=bool(getattr(pipe.config, "is_distilled", False)))

    # ---------------------------------------------------------------- parts and options

    @property
    def has_guidance(self) -> bool:
        return bool(base_module(self.transformer).config.guidance_embeds)

    def _check_layer_skip(self, part: str, skip: int) -> None:
        """Refused: the pipeline reads three fixed hidden layers, and so does training."""
        if skip:
            raise ValueError(f"{part}_layer_skip: Flux.2 reads three fixed hidden layers of its text encoder; set it to 0")

    def configure_flow(self, config) -> None:
        """The run's guidance value (dev only: Klein has no guidance embedding) and token window.
        The text encoder stays frozen, as in OneTrainer (the pipelines' LoRA loader reads
        transformer keys only)."""
        if config.text_encoder.train:
            raise ValueError("text_encoder.train: Flux.2 trains the transformer only (as OneTrainer; the pipelines load "
                             "transformer LoRAs only); turn it off")
        self.guidance_scale = float(config.transformer.guidance_scale)
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)

    # ---------------------------------------------------------------- text

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, 3 x width)}: the pipeline's prompt embeddings."""
        from diffusers import Flux2KleinPipeline, Flux2Pipeline
        from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        encoder = base_module(self.text_encoder)
        layers = HIDDEN_LAYERS[self.variant]
        depth = int(getattr(encoder.config, "text_config", encoder.config).num_hidden_layers)
        if depth < max(layers):
            raise ModelLoadError(f"The text encoder has {depth} layers; Flux.2 {self.variant} reads hidden states {layers}.")
        common = {"dtype": compute_dtype(encoder), "device": module_device(encoder),
                  "max_sequence_length": self.text_encoder_sequence_length, "hidden_states_layers": layers}
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            if self.variant == "dev":
                hidden = Flux2Pipeline._get_mistral_3_small_prompt_embeds(
                    encoder, self.tokenizer, texts, system_message=SYSTEM_MESSAGE, **common)
            else:
                hidden = Flux2KleinPipeline._get_qwen3_prompt_embeds(encoder, self.tokenizer, texts, **common)
        return {"encoder_hidden_states": hidden}

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, 128, h, w) for noisy latents at noise fraction `t` (B,)."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        b, c, h, w = noisy.shape
        hidden = conditioning["encoder_hidden_states"].to(device, dtype)
        noisy = noisy.to(device, dtype)
        guidance = torch.full((b,), self.guidance_scale, device=device, dtype=torch.float32) if self.has_guidance else None
        out = transformer(
            hidden_states=noisy.reshape(b, c, h * w).permute(0, 2, 1), encoder_hidden_states=hidden,
            timestep=t.to(device, dtype).expand(b), img_ids=latent_ids(noisy), txt_ids=text_ids(hidden), guidance=guidance,
            return_dict=False,
        )[0]
        return out.permute(0, 2, 1).reshape(b, c, h, w)

    # ---------------------------------------------------------------- sampling

    def pipeline(self):
        """The dev or Klein pipeline sharing this model's (possibly adapter-wrapped) parts."""
        from diffusers import Flux2KleinPipeline, Flux2Pipeline

        components = {part: base_module(module) for part, module in self.parts.items()}
        scheduler = type(self.scheduler).from_config(self.scheduler.config)
        if self.variant == "dev":
            pipe = Flux2Pipeline(scheduler=scheduler, tokenizer=self.tokenizer, **components)
        else:
            pipe = Flux2KleinPipeline(scheduler=scheduler, tokenizer=self.tokenizer, is_distilled=self.is_distilled, **components)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """dev: the prompt and the distilled guidance value; Klein: real CFG with the negative prompt."""
        dtype = compute_dtype(self.transformer)
        inputs = {"prompt_embeds": self.encode_text([prompt])["encoder_hidden_states"].to(dtype), "guidance_scale": float(cfg_scale)}
        if self.variant == "klein" and cfg_scale > 1 and not self.is_distilled:
            inputs["negative_prompt_embeds"] = self.encode_text([negative_prompt or ""])["encoder_hidden_states"].to(dtype)
        return inputs

    def decode_sample(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """dev hands back its packed, normalised tokens; Klein the VAE's own latents (already
        unpatchified and denormalised)."""
        if latents.dim() == 3:
            b, _, c = latents.shape
            return self.decode_latents(latents.permute(0, 2, 1).reshape(b, c, height // self.bucket_step, width // self.bucket_step))
        return self.vae.decode(latents.to(module_device(self.vae), module_dtype(self.vae))).sample

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in the BFL layout (ComfyUI's diffusion-model loader and
        diffusers' `from_single_file` read it); the text encoder and VAE are the base model's."""
        from ot_gradio.models.flux2_keys import save_original_transformer

        contents = self.transformer_file_contents(dtype, f"flux-2-{self.variant}", metadata)
        return save_original_transformer(path, base_module(self.transformer), *contents)
