"""Flux.1 dev: load, encode, predict, sample, save (a flow-matching family, models/base.py and
the flow contract: the shared core in training/flow_matching.py draws t, makes the noisy input
and the target `noise - latents`; this module maps t to the transformer and back).

What Flux is (OneTrainer's FluxModel / BaseFluxSetup, diffusers' FluxPipeline):
- Two text encoders: CLIP-L (`text_encoder`, 77 tokens) gives only its pooled output (the
  hidden state at the end-of-text token); T5 v1.1 XXL (`text_encoder_2`) gives the token
  sequence, padded to `text_encoder_2_sequence_length` tokens (512 when blank, as the
  pipeline does). A "clip skip" on T5 takes an earlier layer with T5's final norm applied.
- A 16-channel VAE whose latents are shifted and scaled: (z - shift_factor) * scaling_factor.
- The transformer (FluxTransformer2DModel) reads the latents as 2x2 patches (a sequence of
  (h/2)(w/2) tokens of 64 values) with a (0, row, column) position id per token; the text
  tokens get zero ids. Its timestep is t in (0, 1] itself (it multiplies by 1000 inside).
- Flux.1 dev is guidance-distilled: a guidance embedding takes the CFG value. Training feeds
  the config's `transformer.guidance_scale` (OneTrainer's), sampling the sample's CFG scale;
  there is no negative prompt.
- Loading: a hub id, a diffusers folder, `tiny:flux`, or Black Forest Labs' transformer file
  (`flux1-dev.safetensors`), whose text encoders, VAE and configs come from a diffusers folder
  (the config folder) or the hub repo. Saving: a diffusers folder, or the transformer alone in
  the BFL layout (the key map of models/flux_keys.py, both ways).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import (
    base_module,
    compute_dtype,
    input_dtype,
    module_device,
    plain_state_dict,
    torch_dtype,
)
from ot_gradio.models.excluded_parts import caption_lists, zeros
from ot_gradio.models.flow_family import FlowFamily, pack_latents, unpack_latents
from ot_gradio.models.registry import register_family
from ot_gradio.models.transformer_file import assign_converted_weights, read_transformer_file

__all__ = ["FluxDev1", "compute_dtype", "latent_image_ids", "pack_latents", "unpack_latents"]

DEFAULT_T5_SEQUENCE_LENGTH = 512

# OneTrainer's BaseFluxSetup.LAYER_PRESETS for the transformer; the text encoders' own names
TRANSFORMER_PRESETS = {
    "full": [], "attn-mlp": ["attn", "ff.net", "proj_mlp"], "attn-only": ["attn"], "blocks": ["transformer_block"],
}
CLIP_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"]}
T5_PRESETS = {"full": [], "attn-mlp": ["SelfAttention", "DenseReluDense"], "attn-only": ["SelfAttention"]}


# -------------------------------------------------------------------- latents <-> tokens


def latent_image_ids(height: int, width: int, device, dtype) -> torch.Tensor:
    """(H/2 * W/2, 3): (0, row, column) of each patch token, as the pipeline builds them."""
    rows = torch.arange(height // 2, device=device, dtype=dtype)
    cols = torch.arange(width // 2, device=device, dtype=dtype)
    ids = torch.zeros(height // 2, width // 2, 3, device=device, dtype=dtype)
    ids[..., 1] = rows[:, None]
    ids[..., 2] = cols[None, :]
    return ids.reshape(-1, 3)


# -------------------------------------------------------------------- the family


@register_family(ModelType.FLUX_DEV_1)
class FluxDev1(FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Flux.1 dev."""
    fp16_unstable = ("text_encoder_2",)  # T5 overflows in float16

    tokenizer_attrs = {"text_encoder": "tokenizer", "text_encoder_2": "tokenizer_2"}
    folder_parts = ("transformer", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler")
    embedding_keys = {"text_encoder": "clip_l", "text_encoder_2": "t5"}  # OneTrainer's keys
    output_embedding_parts = ("text_encoder_2",)  # CLIP-L gives only its pooled output
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": CLIP_PRESETS, "text_encoder_2": T5_PRESETS}
    t5_part = "text_encoder_2"
    t5_length_option = "text_encoder_2_sequence_length"  # the config option of T5's token window
    single_file_layout = "bfl"  # the transformer file layout load/save_single_file read and write
    modelspec_architecture = "flux-1-dev"  # in the single file's header
    default_steps, default_cfg_scale = 20, 3.5

    def __init__(self, components: Mapping):
        super().__init__(components)
        self.guidance_scale = 1.0
        self.t5_sequence_length = DEFAULT_T5_SEQUENCE_LENGTH

    # ---------------------------------------------------------------- loading

    pipeline_class_name = "FluxPipeline"
    transformer_class_name = "FluxTransformer2DModel"

    @classmethod
    def _single_file_transformer(cls, path: Path, config: str, hub: Mapping, dtype: torch.dtype):
        """The BFL transformer file (.safetensors, or .gguf with its quantized weights kept),
        converted by models/flux_keys.py (diffusers' `from_single_file` converter assumes the full
        3072 width)."""
        from ot_gradio.models.flux_keys import from_bfl

        Transformer = cls._transformer_class()
        with torch.device("meta"):  # no float32 copy of a 12B model before the weights arrive
            transformer = Transformer.from_config(Transformer.load_config(config, subfolder="transformer", **hub))
        assign_converted_weights(transformer, from_bfl(transformer, read_transformer_file(path, dtype), cls.family_name), dtype)
        return transformer

    # ---------------------------------------------------------------- parts and options

    def configure_flow(self, config) -> None:
        """The run's flow options: the guidance value trained and T5's token window. The T5
        tokenizer's model_max_length follows the window, so the text cache keys change with it."""
        self.guidance_scale = float(config.transformer.guidance_scale)  # unused by models without guidance embedding
        length = getattr(config, self.t5_length_option, None)
        self.t5_sequence_length = int(length or DEFAULT_T5_SEQUENCE_LENGTH)
        if self.t5_part in self.tokenizers:  # (T5 left out: its zeros take the window)
            self.tokenizers[self.t5_part].model_max_length = self.t5_sequence_length

    # ---------------------------------------------------------------- text

    def _tokens(self, part: str, texts: Sequence[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.tokenizers[part](
            list(texts), padding="max_length", max_length=length, truncation=True, return_tensors="pt"
        )
        return out.input_ids, out.attention_mask

    def encode_t5(self, texts: Sequence[str], grad: bool = False) -> torch.Tensor:
        """T5 hidden states (B, tokens, width); a layer skip takes an earlier layer with T5's final
        norm applied (OneTrainer's encode_t5). T5 reads no padding mask, as Flux was trained; with
        `mask_padding_tokens` the padding tokens' outputs are zeroed (transformer.attention_mask)."""
        ids, mask = self._tokens(self.t5_part, texts, self.t5_sequence_length)
        return self.padding_zeroed(self.t5_hidden_states(self.t5_part, ids, grad=grad), mask)

    def encode_clip_pooled(self, texts: Sequence[str], grad: bool = False) -> torch.Tensor:
        """CLIP-L's pooled output: the final hidden state at the first end-of-text token (found
        from the tokenizer's id, so added embedding tokens never move it)."""
        tokenizer = self.tokenizer
        ids, _ = self._tokens("text_encoder", texts, tokenizer.model_max_length)
        device = module_device(self.text_encoder)
        ids = ids.to(device)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            hidden = self.text_encoder(ids)[0]
        positions = (ids == tokenizer.eos_token_id).int().argmax(dim=-1)
        return hidden[torch.arange(ids.shape[0], device=device), positions]

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": T5's sequence, "pooled_projections": CLIP-L's pooled output};
        `captions` is one list or one per text encoder part (caption dropout per encoder)."""
        texts, batch = caption_lists(captions, self.text_encoder_names)
        config = base_module(self.transformer).config  # a part left out (include: false) reads zeros of its output's shape
        hidden = self.encode_t5(texts[self.t5_part], self.t5_part in grad) if self.t5_part in texts else \
            zeros(self.transformer, batch, self.t5_sequence_length, config.joint_attention_dim)
        pooled = self.encode_clip_pooled(texts["text_encoder"], "text_encoder" in grad) if "text_encoder" in texts else \
            zeros(self.transformer, batch, config.pooled_projection_dim)
        return {"encoder_hidden_states": hidden, "pooled_projections": pooled.to(hidden.device)}

    # ---------------------------------------------------------------- training

    def transformer_inputs(self, conditioning: Mapping, batch_size: int, image_tokens: int, device, dtype) -> dict:
        """The conditioning inputs besides the image and text tokens (Flux: pooled CLIP and guidance)."""
        inputs = {"pooled_projections": conditioning["pooled_projections"].to(device, dtype)}
        if base_module(self.transformer).config.guidance_embeds:
            inputs["guidance"] = torch.full((batch_size,), self.guidance_scale, device=device, dtype=dtype)
        return inputs

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,), in the
        transformer's dtype."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        b, _, h, w = noisy.shape
        hidden = conditioning["encoder_hidden_states"].to(device, dtype)
        out = transformer(
            hidden_states=pack_latents(noisy.to(device, dtype)),
            timestep=t.to(device, dtype).expand(b),
            encoder_hidden_states=hidden,
            txt_ids=torch.zeros(hidden.shape[1], 3, device=device, dtype=dtype),
            img_ids=latent_image_ids(h, w, device, dtype),
            return_dict=False,
            **self.transformer_inputs(conditioning, b, self.image_seq_len(noisy), device, dtype),
        )[0]
        return unpack_latents(out, h, w)

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Flux.1 dev: the prompt's embeddings and the distilled guidance value (no negative prompt)."""
        cond = self.encode_text([prompt])
        dtype = compute_dtype(self.transformer)
        return {
            "prompt_embeds": cond["encoder_hidden_states"].to(dtype),
            "pooled_prompt_embeds": cond["pooled_projections"].to(dtype),
            "guidance_scale": float(cfg_scale),
            "max_sequence_length": self.t5_sequence_length,
        }

    def decode_sample(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """The pipeline's packed tokens, unpacked and decoded in the VAE's own dtype."""
        scale = self.vae_scale_factor
        return self.decode_latents(unpack_latents(latents, height // scale, width // scale))

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in Black Forest Labs' layout (what ComfyUI's diffusion-model
        loader, Forge and `from_single_file` read); the text encoders and VAE are the base model's."""
        from ot_gradio.models.flux_keys import save_bfl_transformer

        return save_bfl_transformer(
            path, base_module(self.transformer), plain_state_dict(self.transformer, "transformer"), torch_dtype(dtype),
            metadata=self.file_metadata(self.modelspec_architecture, metadata),
            model=self.family_name,
        )
