"""Wan 2.1 text-to-video: load, encode, predict, sample, save (a flow-matching family: the shared
core in training/flow_matching.py draws t, makes the noisy input and the target
`noise - latents`; this module maps t to the transformer and back). The first video family:
its items are clips [3, frames, H, W] (data/video.py; images are one frame), `frame_step` 4.

What Wan 2.1 is (diffusers' WanPipeline):
- One text encoder, UMT5-XXL (`text_encoder`, a transformers UMT5EncoderModel). Each prompt is
  cleaned as the pipeline does (its `prompt_clean`), padded to `text_encoder_sequence_length`
  tokens (blank: 512, the pipeline's `max_sequence_length`) and encoded with its mask; the
  hidden states past each prompt's own tokens are set to zero, as the pipeline does.
- WanTransformer3DModel (patch (1, 2, 2)) reads latents (B, 16, F', H/8, W/8), the timestep as
  t * 1000 (the scheduler's sigma * 1000) and predicts the flow velocity `noise - latents`.
- The VAE is AutoencoderKLWan (causal 3D: F frames -> (F - 1) / 4 + 1 latent frames, 8x per
  side); latents are `(z - latents_mean) / latents_std` per channel, what the pipeline inverts.
- The repos sample with UniPC in flow mode (flow_shift 3 for 480p); training draws t with
  FlowMatchEuler at the same shift (`noise_scheduler`).
- Samples are short clips: `sample` returns the frames (PIL images) of `sample_frames` frames,
  the run's Frames cut to 4k+1 once `configure_flow` has read the run (the sample tool: 5).
- Loading: a hub id (Wan-AI/Wan2.1-T2V-1.3B-Diffusers), a diffusers folder or `tiny:wan`;
  single files are refused. Saving: a diffusers folder; LoRA as diffusers/PEFT keys
  (`transformer.blocks.0.attn1.to_q.lora_A.weight`) that WanPipeline.load_lora_weights reads, or
  KOHYA_LORA with the original layer names ComfyUI maps (`lora_unet_blocks_0_self_attn_q`).
- Wan 2.2 T2V A14B (Wan22T2VA14B) is Wan 2.1's layout twice: two experts, one per noise range;
  Wan 2.2 I2V A14B (models/wan_i2v.py) the same with each clip's first frame read beside the noise;
  Wan 2.2 TI2V 5B (models/wan_ti2v.py) one transformer that does both, text- and image-to-video.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, Expert, ModelType
from ot_gradio.models.common import (
    ModelLoadError,
    base_module,
    cast_state_dict,
    compute_dtype,
    input_dtype,
    module_device,
    wan_vae_decode,
    wan_vae_encode,
)
from ot_gradio.models.flow_family import FlowFamily, TokenWindow, flow_training_scheduler
from ot_gradio.models.key_layout import save_tensors
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family
from ot_gradio.models.sampling_parts import turns_on_device
from ot_gradio.models.video_family import VideoSampling

DEFAULT_SEQUENCE_LENGTH = 512
# The transformer's layer presets: self- and cross-attention and the feed-forward of each block.
_ATTN = ["attn1.", "attn2."]
TRANSFORMER_PRESETS = {
    "full": [], "attn-mlp": [*_ATTN, "ffn."], "attn-only": _ATTN, "blocks": ["blocks."],
}
UMT5_PRESETS = {"full": [], "attn-only": ["SelfAttention."], "attn-mlp": ["SelfAttention.", "DenseReluDense."]}


@register_family(ModelType.WAN_2_1)
class Wan21(VideoSampling, TokenWindow, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Wan 2.1."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    comfy_lora_names = "wan"  # KOHYA_LORA: ComfyUI's names (models/comfy_lora_names.py)
    single_file_layout = "original"  # Wan-AI's transformer files (ComfyUI's), through diffusers' converter; written by wan_keys.py
    t5_part = "text_encoder"
    patch_size = None  # the transformer config's (1, 2, 2)
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": UMT5_PRESETS}
    default_sequence_length = DEFAULT_SEQUENCE_LENGTH
    default_steps, default_cfg_scale = 30, 5.0
    pipeline_class_name = "WanPipeline"
    transformer_class_name = "WanTransformer3DModel"
    two_experts = False  # Wan 2.2 A14B: a second transformer, `transformer_2`, for low noise

    def __init__(self, components: Mapping):
        super().__init__(components)
        if components.get("transformer_2") is not None and not self.two_experts:
            raise ModelLoadError(f"The model has two transformers (a Wan 2.2 A14B model), not one as {self.family_name}; "
                                 "pick the model type WAN_2_2_T2V_A14B (WAN_2_2_I2V_A14B for the image-to-video one).")
        config = base_module(components["transformer"]).config
        if config.in_channels != config.out_channels and not self.image_to_video:
            which = ("pick the model type WAN_2_1_I2V (a Wan 2.1 I2V model: it reads CLIP image embeddings)"
                     if config.get("image_dim") is not None else "pick the model type WAN_2_2_I2V_A14B")
            raise ModelLoadError(f"The transformer reads {config.in_channels} channels for {config.out_channels} it predicts: an "
                                 f"image-to-video Wan model, not {self.family_name}; {which}.")
        self.noise_scheduler = flow_training_scheduler(self.scheduler)
        self.text_encoder_sequence_length = DEFAULT_SEQUENCE_LENGTH

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in the original layout (ORIGINAL_TRANSFORMER / COMFY_TRANSFORMER: the
        file ComfyUI loads and `from_single_file` reads back); the text encoder and VAE are the base model's."""
        from ot_gradio.models.wan_keys import original_state_dict

        weights, dtype, header = self.transformer_file_contents(dtype, self.lora_base_model_version, metadata)
        return save_tensors(path, original_state_dict(cast_state_dict(weights, dtype)), header)

    def configure_flow(self, config) -> None:
        """The run's token window (`text_encoder_sequence_length`; blank: 512), then the video
        families' sample length (VideoSampling)."""
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)
        super().configure_flow(config)

    # ---------------------------------------------------------------- video latents

    @property
    def vae_scale_factor(self) -> int:
        return int(self.vae.config.scale_factor_spatial)

    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Latents (B, 16, F', h, w) for pixels in [-1, 1] (B, 3, F, H, W); an image batch
        (B, 3, H, W) is one frame. Normalised per channel with the VAE's latents_mean / _std."""
        return wan_vae_encode(self.vae, pixels.unsqueeze(2) if pixels.ndim == 4 else pixels, sample=sample, generator=generator)

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels (B, 3, F, H, W) in [-1, 1] for normalised latents (the inverse of `encode_images`)."""
        return wan_vae_decode(self.vae, latents)

    def image_seq_len(self, latents: torch.Tensor) -> int:
        _, ph, pw = base_module(self.transformer).config.patch_size
        frames = latents.shape[2] if latents.ndim == 5 else 1
        return frames * (latents.shape[-2] // ph) * (latents.shape[-1] // pw)

    # ---------------------------------------------------------------- text

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, width)}: UMT5's states with its mask, zero past
        each prompt's tokens, exactly as WanPipeline's `_get_t5_prompt_embeds` (layer skip: an
        earlier layer with the final norm)."""
        from diffusers.pipelines.wan.pipeline_wan import prompt_clean

        texts = [prompt_clean(str(t)) for t in (captions["text_encoder"] if isinstance(captions, Mapping) else captions)]
        out = self.tokenizer(texts, padding="max_length", max_length=self.text_encoder_sequence_length, truncation=True,
                             add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        mask = out.attention_mask
        hidden = self.t5_hidden_states("text_encoder", out.input_ids, mask, grad="text_encoder" in grad)
        return {"encoder_hidden_states": hidden * mask.to(hidden.device).unsqueeze(-1).to(hidden.dtype)}

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, F', h, w) for noisy latents at noise fraction `t` (B,)."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        timestep = self.transformer_timestep(noisy, (t.to(device, torch.float32) * 1000).expand(noisy.shape[0]), batch)
        image = conditioning.get("encoder_hidden_states_image")  # Wan 2.1 I2V: the first frame's CLIP embeddings
        return transformer(
            hidden_states=noisy.to(device, dtype), timestep=timestep,
            encoder_hidden_states=conditioning["encoder_hidden_states"].to(device, dtype),
            encoder_hidden_states_image=None if image is None else image.to(device, dtype), return_dict=False,
        )[0]

    def transformer_timestep(self, noisy: torch.Tensor, timestep: torch.Tensor, batch=None) -> torch.Tensor:
        """The transformer's timestep input: one per clip (B,) here (Wan 2.2 TI2V 5B: one per token
        for a clip that starts from its given first frame)."""
        return timestep

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        dtype = compute_dtype(self.transformer)
        return {
            "prompt_embeds": self.encode_text([prompt])["encoder_hidden_states"].to(dtype),
            "negative_prompt_embeds": self.encode_text([negative_prompt or ""])["encoder_hidden_states"].to(dtype),
            "guidance_scale": float(cfg_scale),
        }



@register_family(ModelType.WAN_2_2_T2V_A14B)
class Wan22T2VA14B(Wan21):
    """Wan 2.2 T2V A14B: Wan 2.1's interface and VAE with two transformers of 14B, `transformer`
    for high noise (t >= the folder's boundary_ratio, 0.875: a sample's first steps) and
    `transformer_2` for the rest. A run trains one of them (`trained_expert`), on its own range
    of t only (training/flow_matching.py), as musubi-tuner, diffusion-pipe and DiffSynth train
    one LoRA per expert; that expert is the `transformer` part (LoRA, quantization, device,
    memory table), the other waits on the CPU until a sample, where both run as the pipeline runs
    them. A LoRA file has `transformer.` keys either way: WanPipeline.load_lora_weights loads a
    LOW_NOISE one into `transformer_2` with load_into_transformer_2=True."""

    single_file_layout = None  # two experts: a transformer file would not say which one it is
    two_experts = True

    def __init__(self, components: Mapping, boundary_ratio: float = 0.875):
        super().__init__(components)
        if components.get("transformer_2") is None:
            raise ModelLoadError("The model has no transformer_2 (the low-noise expert): it is not Wan 2.2 A14B. "
                                 "Pick WAN_2_1 or WAN_2_2_TI2V_5B for a one-transformer Wan model.")
        self.experts = {Expert.HIGH_NOISE: components["transformer"], Expert.LOW_NOISE: components["transformer_2"]}
        self.boundary_ratio = float(boundary_ratio)
        self.choose_expert(Expert.HIGH_NOISE)

    @classmethod
    def _from_pipeline(cls, pipe):
        return cls(pipe.components, pipe.config.get("boundary_ratio") or 0.875)

    @classmethod
    def _pipeline_from(cls, source, dtype, hub: Mapping, **parts):
        """Both experts load in the transformer's dtype."""
        return super()._pipeline_from(source, {**dtype, "transformer_2": dtype.get("transformer", dtype["default"])}, hub, **parts)

    def choose_expert(self, expert: Expert | str) -> None:
        """`expert` becomes the `transformer` part, trained on its range of t; the other is frozen.
        A LoRA file's header names it (ss_base_model_version `wan_2_2_t2v_a14b_low_noise`)."""
        self.trained_expert = Expert(expert)
        self.lora_base_model_version = f"{type(self).lora_base_model_version}_{self.trained_expert.value.lower()}"
        high = self.trained_expert == Expert.HIGH_NOISE
        self.transformer = self.experts[self.trained_expert]
        self.idle_expert = self.experts[Expert.LOW_NOISE if high else Expert.HIGH_NOISE]
        self.idle_expert.requires_grad_(False)
        self.timestep_range = (self.boundary_ratio, 1.0) if high else (0.0, self.boundary_ratio)

    @property
    def saved_parts(self) -> dict[str, torch.nn.Module]:
        """A fine-tune's folder is the whole model: both experts, each in its place."""
        high = self.trained_expert == Expert.HIGH_NOISE
        trained, idle = self.transformer, self.idle_expert
        return {**self.parts, "transformer": trained if high else idle, "transformer_2": idle if high else trained}

    def configure_flow(self, config) -> None:
        """The run's expert (`trained_expert`), before Wan 2.1's options (its embedders kept unquantized)."""
        self.choose_expert(getattr(config, "trained_expert", Expert.HIGH_NOISE))
        super().configure_flow(config)

    def pipeline(self):
        """WanPipeline with both experts in their places (the trained one with its LoRA) and the boundary."""
        pipe = super().pipeline()
        trained, idle = base_module(self.transformer), base_module(self.idle_expert)
        high, low = (trained, idle) if self.trained_expert == Expert.HIGH_NOISE else (idle, trained)
        pipe.register_modules(transformer=high, transformer_2=low)
        pipe.register_to_config(boundary_ratio=self.boundary_ratio)
        return pipe

    def sample(self, *args, device: torch.device | str | None = None, **kwargs):
        """A clip from both experts, one on the sampling device at a time: as the pipeline turns
        to an expert, it comes to the device and the other goes where the idle one waits (the
        CPU), so a sample holds one expert's weights there, not two; the trained expert is put
        back afterwards (parked_for_sampling)."""
        target = torch.device(device) if device is not None else module_device(self.transformer)
        with turns_on_device(base_module(self.transformer), self.idle_expert, target):
            return super().sample(*args, device=device, **kwargs)
