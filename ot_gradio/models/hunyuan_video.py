"""HunyuanVideo text-to-video: load, encode, predict, sample, save (a flow-matching family: the
shared core in training/flow_matching.py draws t, makes the noisy input and the target
`noise - latents`; this module maps t to the transformer and back). A video family as Wan is:
its items are clips [3, frames, H, W] (data/video.py; images are one frame), `frame_step` 4.

What HunyuanVideo is (diffusers' HunyuanVideoPipeline, OneTrainer's HunyuanVideoModel):
- Text encoder 1, a Llama (`text_encoder`, LlamaModel): each prompt is put in the pipeline's
  prompt template, tokenized to `crop_start` (95) + the token window (blank: 256, the
  pipeline's `max_sequence_length`) with right padding and a mask; the third-to-last hidden
  state is read (a layer skip reads an earlier one) and the template's first 95 tokens are
  dropped from the states and the mask.
- Text encoder 2, CLIP-L (`text_encoder_2`): its pooled output of 77 tokens.
- HunyuanVideoTransformer3DModel (patch (1, 2, 2)) reads latents (B, 16, F', H/8, W/8), the
  timestep as t * 1000 (the scheduler's sigma * 1000), the Llama states with their mask, CLIP's
  pooled output and, being guidance-distilled, a guidance value * 1000: training feeds the
  config's `transformer.guidance_scale` (OneTrainer's), samples their CFG scale (the
  pipeline's default is 6). It predicts the flow velocity `noise - latents`.
- The VAE is AutoencoderKLHunyuanVideo (causal 3D: F frames -> (F - 1) / 4 + 1 latent frames, 8x
  per side); latents are `z * scaling_factor`, what the pipeline divides by before decoding.
- The repo samples with FlowMatchEuler at shift 7; training draws t with the run's timestep
  shift (our preset: 7).
- The Llama tokenizer is read from its tokenizer.json as it is: the hub repo's model_index.json
  names LlamaTokenizerFast, which in transformers 5 rebuilds a SentencePiece-style (Metaspace)
  tokenizer from the file's vocabulary and splits Llama 3's words wrongly.
- Loading: a hub id (hunyuanvideo-community/HunyuanVideo), a diffusers folder or
  `tiny:hunyuan_video`, or a transformer file in the original layout (Tencent's names, the file
  ComfyUI loads, or a .gguf of it) as the base model or `transformer.model_name`, the other parts
  from the base model (models/hunyuan_video_keys.py). Saving: a diffusers folder or that
  transformer file (ORIGINAL_TRANSFORMER / COMFY_TRANSFORMER); LoRA as
  diffusers/PEFT keys (`transformer.transformer_blocks.0.attn.to_q.lora_A.weight`) that
  HunyuanVideoPipeline.load_lora_weights reads, or KOHYA_LORA / COMFY_LORA in ComfyUI's names
  (`diffusion_model.double_blocks.0.img_attn.qkv`), q, k, v (and the single blocks' MLP input)
  written as one layer on the fused weight (training/lora_fusion.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import (
    base_module,
    cast_state_dict,
    compute_dtype,
    input_dtype,
    module_device,
)
from ot_gradio.models.excluded_parts import caption_lists, zeros
from ot_gradio.models.flow_family import FlowFamily
from ot_gradio.models.key_layout import save_tensors
from ot_gradio.models.registry import register_family
from ot_gradio.models.transformer_file import assign_converted_weights, read_transformer_file
from ot_gradio.models.video_family import VideoSampling

DEFAULT_SEQUENCE_LENGTH = 256  # the pipeline's max_sequence_length: Llama tokens after the template
CLIP_LENGTH = 77
LLAMA_DEFAULT_SKIP = 2  # the pipeline's num_hidden_layers_to_skip: the third-to-last hidden state
# OneTrainer's BaseHunyuanVideoSetup.LAYER_PRESETS for the transformer; the text encoders' own names
TRANSFORMER_PRESETS = {
    "full": [], "attn-mlp": ["attn", "ff.net", "proj_mlp"], "attn-only": ["attn"], "blocks": ["transformer_block"],
}
LLAMA_PRESETS = {"full": [], "attn-mlp": ["self_attn.", "mlp."], "attn-only": ["self_attn."]}
CLIP_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"]}


def prompt_template() -> dict:
    """The pipeline's prompt template and its crop_start (the template's tokens before the prompt)."""
    from diffusers.pipelines.hunyuan_video.pipeline_hunyuan_video import DEFAULT_PROMPT_TEMPLATE

    return DEFAULT_PROMPT_TEMPLATE


@register_family(ModelType.HUNYUAN_VIDEO)
class HunyuanVideo(VideoSampling, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for HunyuanVideo."""
    fp16_unstable = ("transformer",)  # as OneTrainer

    tokenizer_attrs = {"text_encoder": "tokenizer", "text_encoder_2": "tokenizer_2"}
    folder_parts = ("transformer", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler")
    embedding_keys = {"text_encoder": "llama", "text_encoder_2": "clip_l"}  # OneTrainer's (its HunyuanVideoEmbeddingSaver)
    output_embedding_parts = ("text_encoder",)  # CLIP-L gives only its pooled output
    patch_size = None  # the transformer config's 2 (and patch_size_t 1)
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": LLAMA_PRESETS, "text_encoder_2": CLIP_PRESETS}
    default_steps, default_cfg_scale = 30, 6.0
    pipeline_class_name = "HunyuanVideoPipeline"
    transformer_class_name = "HunyuanVideoTransformer3DModel"
    single_file_layout = "original"  # Tencent's transformer files (ComfyUI's), read and written by hunyuan_video_keys.py

    def __init__(self, components: Mapping):
        super().__init__(components)
        self.guidance_scale = 1.0
        self.text_encoder_sequence_length = DEFAULT_SEQUENCE_LENGTH

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """KOHYA_LORA / COMFY_LORA name every layer as ComfyUI's HunyuanVideo model and text encoders
        do, the transformer's fused weights as one layer each (models/comfy_lora_names.py `hunyuan_video`)."""
        from ot_gradio.models.comfy_lora_names import hunyuan_video
        from ot_gradio.models.key_layout import layer_paths

        paths = {part: [p.removeprefix("text_model.") for p in layer_paths(base_module(getattr(self, part)))]
                 for part in self.text_encoder_names}  # save_lora drops CLIP's `text_model.`
        return hunyuan_video(base_module(self.transformer), paths)

    @classmethod
    def _single_file_transformer(cls, path: Path, config: str, hub: Mapping, dtype: torch.dtype):
        """The original-layout transformer file (.safetensors, or .gguf with its quantized weights
        kept) through diffusers' converter, the single blocks' fused `linear1` split at the config's
        width (the converter assumes the full model's 3072; models/hunyuan_video_keys.py)."""
        from ot_gradio.models.hunyuan_video_keys import diffusers_state_dict

        Transformer = cls._transformer_class()
        with torch.device("meta"):  # no float32 copy of a 13B model before the weights arrive
            transformer = Transformer.from_config(Transformer.load_config(config, subfolder="transformer", **hub))
        hidden = transformer.config.num_attention_heads * transformer.config.attention_head_dim
        weights, expected = diffusers_state_dict(read_transformer_file(path, dtype), hidden), transformer.state_dict().keys()
        lacking, extra = sorted(expected - weights.keys()), sorted(weights.keys() - expected)
        if lacking or extra:
            what = f"has no {lacking[:3]}" if lacking else f"has keys a HunyuanVideo transformer has not: {extra[:3]}"
            raise ValueError(f"The transformer file {what} (diffusers' names); is it a HunyuanVideo transformer of this size, "
                             "in the original layout?")
        assign_converted_weights(transformer, weights, dtype)
        return transformer

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in the original layout (ORIGINAL_TRANSFORMER / COMFY_TRANSFORMER: the
        file ComfyUI loads; diffusers' converter reads it back); the text encoders and VAE are the base model's."""
        from ot_gradio.models.hunyuan_video_keys import original_state_dict

        weights, dtype, header = self.transformer_file_contents(dtype, self.lora_base_model_version, metadata)
        return save_tensors(path, original_state_dict(cast_state_dict(weights, dtype)), header)

    @classmethod
    def _text_only_tokenizers(cls, source: str | Path, hub: Mapping) -> dict:
        """The Llama tokenizer from its tokenizer.json as it is (see the module's notes)."""
        from transformers import PreTrainedTokenizerFast

        return {**super()._text_only_tokenizers(source, hub),
                "tokenizer": PreTrainedTokenizerFast.from_pretrained(str(source), subfolder="tokenizer", **hub)}

    # ---------------------------------------------------------------- parts and options

    @property
    def text_encoder_sequence_length(self) -> int:
        return self._sequence_length

    @text_encoder_sequence_length.setter
    def text_encoder_sequence_length(self, length: int | None) -> None:
        """The Llama token window after the template; the tokenizer's model_max_length follows
        it (template included), so cached text embeddings are keyed by it."""
        self._sequence_length = int(length or DEFAULT_SEQUENCE_LENGTH)
        if self.tokenizer is not None:  # (Llama left out: its zeros take the window)
            self.tokenizer.model_max_length = self._sequence_length + prompt_template()["crop_start"]

    def configure_flow(self, config) -> None:
        """The run's guidance value trained and Llama's token window (blank: 256), then the video
        families' sample length (VideoSampling)."""
        self.guidance_scale = float(config.transformer.guidance_scale)
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)
        super().configure_flow(config)

    def _layer_skip_top(self, part: str) -> int:
        """Llama: the layers below the third-to-last one; CLIP gives its pooled output only (no skip)."""
        if part == "text_encoder_2":
            return 0
        return int(base_module(self.text_encoder).config.num_hidden_layers) - LLAMA_DEFAULT_SKIP

    # ---------------------------------------------------------------- video latents

    @property
    def vae_scale_factor(self) -> int:
        return int(self.vae.config.spatial_compression_ratio)

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Latents (B, 16, F', h, w) scaled by the VAE's scaling factor for pixels in [-1, 1]
        (B, 3, F, H, W); an image batch (B, 3, H, W) is one frame."""
        return super().encode_images(pixels.unsqueeze(2) if pixels.ndim == 4 else pixels, sample=sample, generator=generator)

    def image_seq_len(self, latents: torch.Tensor) -> int:
        config = base_module(self.transformer).config
        frames = latents.shape[2] // config.patch_size_t if latents.ndim == 5 else 1
        return frames * (latents.shape[-2] // config.patch_size) * (latents.shape[-1] // config.patch_size)

    # ---------------------------------------------------------------- text

    def encode_llama(self, texts: Sequence[str], grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The Llama states (B, window, width) and mask (B, window), as the pipeline's
        `_get_llama_prompt_embeds`: the template around each prompt, its first crop_start tokens dropped."""
        template = prompt_template()
        crop = int(template["crop_start"])
        out = self.tokenizer([template["template"].format(t) for t in texts], max_length=self.text_encoder_sequence_length + crop,
                             padding="max_length", truncation=True, return_attention_mask=True, return_tensors="pt")
        device = module_device(self.text_encoder)
        ids, mask = out.input_ids.to(device), out.attention_mask.to(device)
        if device.type == "meta" and not grad:  # the memory probe with CLIP trained: a frozen Llama's
            # states (its masks call .item(), which meta tensors cannot; it runs before the denoiser, under no_grad)
            width = base_module(self.text_encoder).config.hidden_size
            return torch.zeros(*ids.shape, width, device=device)[:, crop:], mask[:, crop:]
        layer = LLAMA_DEFAULT_SKIP + self.layer_skips.get("text_encoder", 0) + 1
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            hidden = self.text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-layer]
            hidden = self.output_embedded("text_encoder", ids, hidden)
        return hidden[:, crop:], mask[:, crop:]

    def encode_clip_pooled(self, texts: Sequence[str], grad: bool = False) -> torch.Tensor:
        """CLIP-L's pooled output for 77 tokens, as the pipeline's `_get_clip_prompt_embeds`."""
        ids = self.tokenizer_2(list(texts), padding="max_length", max_length=CLIP_LENGTH, truncation=True, return_tensors="pt").input_ids
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            return self.text_encoder_2(ids.to(module_device(self.text_encoder_2)), output_hidden_states=False).pooler_output

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states", "attention_mask": Llama's, "pooled_projections": CLIP's};
        `captions` is one list or one per text encoder part (caption dropout per encoder)."""
        texts, batch = caption_lists(captions, self.text_encoder_names)
        config = base_module(self.transformer).config  # a part left out (include: false) reads zeros of its output's shape
        if "text_encoder" in texts:
            hidden, mask = self.encode_llama(texts["text_encoder"], "text_encoder" in grad)
        else:  # the mask keeps one token: an all-zero mask would divide by zero in the transformer's token refiner
            hidden = zeros(self.transformer, batch, self.text_encoder_sequence_length, config.text_embed_dim)
            mask = torch.zeros(batch, self.text_encoder_sequence_length, dtype=torch.long, device=hidden.device)
            mask[:, 0] = 1
        pooled = self.encode_clip_pooled(texts["text_encoder_2"], "text_encoder_2" in grad) if "text_encoder_2" in texts else \
            zeros(self.transformer, batch, config.pooled_projection_dim)
        return {"encoder_hidden_states": hidden, "attention_mask": mask, "pooled_projections": pooled.to(hidden.device)}

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, F', h, w) for noisy latents at noise fraction `t` (B,)."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        b = noisy.shape[0]
        guidance = None
        if base_module(transformer).config.guidance_embeds:
            guidance = torch.full((b,), self.guidance_scale * 1000.0, device=device, dtype=dtype)
        return transformer(
            hidden_states=noisy.to(device, dtype), timestep=(t.to(device, torch.float32) * 1000).expand(b),
            encoder_hidden_states=conditioning["encoder_hidden_states"].to(device, dtype),
            encoder_attention_mask=conditioning["attention_mask"].to(device, dtype),
            pooled_projections=conditioning["pooled_projections"].to(device, dtype), guidance=guidance, return_dict=False,
        )[0]

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """The prompt's embeddings and the distilled guidance value (the pipeline's negative prompt
        only acts with its true CFG, which samples leave off)."""
        cond = self.encode_text([prompt])
        dtype = compute_dtype(self.transformer)
        return {
            "prompt_embeds": cond["encoder_hidden_states"].to(dtype), "prompt_attention_mask": cond["attention_mask"],
            "pooled_prompt_embeds": cond["pooled_projections"].to(dtype), "guidance_scale": float(cfg_scale),
        }
