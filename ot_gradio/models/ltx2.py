"""LTX-2 text-to-video and image-to-video: load, encode, predict, sample, save (a flow-matching family: the shared
core in training/flow_matching.py draws t, makes the noisy input and the target
`noise - latents`; this module maps t to the transformer and back). A video family as Wan is:
its items are clips [3, frames, H, W] (data/video.py; images are one frame), `frame_step` 8.

What LTX-2 is (diffusers' LTX2Pipeline):
- One text encoder, Gemma 3 (`text_encoder`, Gemma3ForConditionalGeneration): each prompt is
  stripped, tokenized to the token window (blank: 1024, the pipeline's `max_sequence_length`)
  with left padding, and every hidden state (the embeddings and each layer) is stacked and
  flattened to (B, window, width * (layers + 1)), as the pipeline's `_get_gemma_prompt_embeds`.
- The text connectors (`connectors`, LTX2TextConnectors, frozen) turn those into the video and
  the audio streams' text states and their mask; they run here with the text encoder, so the
  text cache holds their output.
- LTX2VideoTransformer3DModel is a joint audio + video transformer. Its video input is the
  latents (B, 128, F', H/32, W/32) packed into tokens, the timestep t * 1000; it predicts the
  flow velocity `noise - latents`. Video-only training (SimpleTuner's way for clips without
  audio): the audio stream reads zero audio latents noised at the same t, its length the clip's
  duration at the run's frame rate; the loss is on the video alone.
- The VAE is AutoencoderKLLTX2Video (causal 3D: F frames -> (F - 1) / 8 + 1 latent frames, 32x
  per side); latents are `(z - latents_mean) * scaling_factor / latents_std` per channel, what
  the pipeline inverts before decoding.
- Image-to-video (LTX2ImageToVideoPipeline) is the same model with its first latent frame given
  clean at timestep 0 (models/start_frame.py, as Wan 2.2 TI2V 5B): `image_to_video_share` of the
  training clips start so, and a sample with a control image starts from it.
- Samples are short clips without audio (the pipeline's audio latents are dropped, the vocoder
  never runs): LTX-2.0's guidance, CFG alone (no STG, modality or rescale terms).
- Loading: a hub id (Lightricks/LTX-2), a diffusers folder or `tiny:ltx2`; single files are
  refused. The audio VAE and the vocoder are loaded (the pipeline is built from them) but not
  run. Saving: a diffusers folder; LoRA as diffusers/PEFT keys
  (`transformer.transformer_blocks.0.attn1.to_q.lora_A.weight`) that
  LTX2Pipeline.load_lora_weights reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import base_module, input_dtype, module_device, module_dtype
from ot_gradio.models.flow_family import FlowFamily
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family
from ot_gradio.models.start_frame import StartFromFirstFrame
from ot_gradio.models.video_family import VideoSampling

DEFAULT_SEQUENCE_LENGTH = 1024  # the pipeline's max_sequence_length
SAMPLE_TOOL_FRAMES = 9  # a sample's frames outside a run (the sample tool): short, quick to make
EXTRA_PARTS = ("connectors", "audio_vae", "vocoder")  # loaded with the model, not config parts
# The transformer's video layers (its audio stream and the video-to-audio attention left out):
# self- and cross-attention, the attention from the audio, and the feed-forward of each block.
_VIDEO_ATTN = [".attn1.", ".attn2.", ".audio_to_video_attn."]
TRANSFORMER_PRESETS = {
    "full": [], "attn-mlp": [*_VIDEO_ATTN, ".ff."], "attn-only": _VIDEO_ATTN, "blocks": ["transformer_blocks."],
}
# Gemma's language model only ("full"): its vision tower never runs on a prompt (the attention
# presets' names are the tower's too; its layers then get LoRA that stays at zero)
GEMMA_PRESETS = {"full": ["language_model."], "attn-mlp": ["self_attn.", "mlp."], "attn-only": ["self_attn."]}


@register_family(ModelType.LTX_2)
class LTX2(StartFromFirstFrame, VideoSampling, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for LTX-2."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    folder_parts = ("transformer", "text_encoder", "tokenizer", "connectors", "vae", "audio_vae", "vocoder", "scheduler")
    resident_modules = ("connectors",)  # on the device with the parts (to()), counted by the memory plan
    patch_size = None  # the transformer config's 1 (and patch_size_t 1)
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": GEMMA_PRESETS}
    default_steps, default_cfg_scale = 40, 4.0
    pipeline_class_name = "LTX2Pipeline"
    sample_frames = SAMPLE_TOOL_FRAMES
    transformer_class_name = "LTX2VideoTransformer3DModel"

    def __init__(self, components: Mapping):
        super().__init__(components)
        for part in EXTRA_PARTS:  # frozen: no optimizer sees them
            setattr(self, part, components[part].requires_grad_(False).eval())
        self.frame_rate = 24.0
        self.text_encoder_sequence_length = DEFAULT_SEQUENCE_LENGTH

    @classmethod
    def _pipeline_from(cls, source: str | Path, dtype, hub: Mapping, **parts):
        """The connectors load in the text encoder's dtype, the audio VAE and vocoder in the VAE's."""
        if isinstance(dtype, Mapping):
            default = dtype.get("default", torch.float32)
            dtype = {**dtype, "connectors": dtype.get("text_encoder", default),
                     "audio_vae": dtype.get("vae", default), "vocoder": dtype.get("vae", default)}
        return super()._pipeline_from(source, dtype, hub, **parts)

    # ---------------------------------------------------------------- parts and options

    @property
    def text_encoder_sequence_length(self) -> int:
        return self._sequence_length

    @text_encoder_sequence_length.setter
    def text_encoder_sequence_length(self, length: int | None) -> None:
        """The Gemma token window; the tokenizer's model_max_length follows it, so cached text
        embeddings are keyed by it."""
        self._sequence_length = int(length or DEFAULT_SEQUENCE_LENGTH)
        self.tokenizer.model_max_length = self._sequence_length

    def configure_flow(self, config) -> None:
        """The run's token window (blank: 1024) and frame rate (the audio stream's length and the
        transformer's time positions), then the video families' sample length (VideoSampling)."""
        from ot_gradio.data.video import run_sampling

        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)
        self.frame_rate = float(run_sampling(config, self.frame_step).fps)
        super().configure_flow(config)

    def to(self, device):
        """Every part and the connectors to `device` (the audio VAE and vocoder never run)."""
        super().to(device)
        self.connectors.to(device)
        return self

    def _layer_skip_top(self, part: str) -> int:
        """None: the connectors read every Gemma layer."""
        return 0

    # ---------------------------------------------------------------- video latents

    @property
    def vae_scale_factor(self) -> int:
        return int(self.vae.spatial_compression_ratio)

    def _latent_stats(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
        shape = (1, -1, 1, 1, 1)
        mean = self.vae.latents_mean.view(shape).to(like.device, like.dtype)
        std = self.vae.latents_std.view(shape).to(like.device, like.dtype)
        return mean, std, float(self.vae.config.scaling_factor)

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Normalised latents (B, C, F', h, w) for pixels in [-1, 1] (B, 3, F, H, W); an image
        batch (B, 3, H, W) is one frame."""
        if pixels.ndim == 4:
            pixels = pixels.unsqueeze(2)
        dist = self.vae.encode(pixels.to(module_device(self.vae), module_dtype(self.vae))).latent_dist
        latents = dist.sample(generator) if sample else dist.mode()
        mean, std, scale = self._latent_stats(latents)
        return (latents - mean) * scale / std

    def _decode_raw(self, latents: torch.Tensor) -> torch.Tensor:
        latents = latents.to(module_device(self.vae), module_dtype(self.vae))
        timestep = None
        if self.vae.config.timestep_conditioning:  # the pipeline's decode_timestep 0
            timestep = torch.zeros(latents.shape[0], device=latents.device, dtype=latents.dtype)
        return self.vae.decode(latents, timestep, return_dict=False)[0]

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels (B, 3, F, H, W) in [-1, 1] for normalised latents (the inverse of `encode_images`)."""
        mean, std, scale = self._latent_stats(latents)
        return self._decode_raw(latents * std / scale + mean)

    def image_seq_len(self, latents: torch.Tensor) -> int:
        config = base_module(self.transformer).config
        frames = latents.shape[2] // config.patch_size_t if latents.ndim == 5 else 1
        return frames * (latents.shape[-2] // config.patch_size) * (latents.shape[-1] // config.patch_size)

    # ---------------------------------------------------------------- text

    def encode_gemma(self, texts: Sequence[str], grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Gemma's stacked hidden states (B, window, width * (layers + 1)) and the mask, as the
        pipeline's `_get_gemma_prompt_embeds` (left padding, prompts stripped)."""
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        out = self.tokenizer([str(t).strip() for t in texts], padding="max_length", max_length=self.text_encoder_sequence_length,
                             truncation=True, add_special_tokens=True, return_tensors="pt")
        device = module_device(self.text_encoder)
        ids, mask = out.input_ids.to(device), out.attention_mask.to(device)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            states = self.text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        return torch.stack(states, dim=-1).flatten(2, 3), mask

    def connect(self, states: torch.Tensor, mask: torch.Tensor) -> dict:
        """The connectors' video and audio text states and their mask (frozen; run beside the text encoder)."""
        connectors = self.connectors.to(states.device)
        dtype = module_dtype(connectors)
        video, audio, connector_mask = connectors(states.to(dtype), mask, padding_side="left")
        return {"encoder_hidden_states": video, "audio_encoder_hidden_states": audio, "attention_mask": connector_mask}

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states", "audio_encoder_hidden_states", "attention_mask"}: the
        connectors' output for the Gemma states of `encode_gemma`."""
        texts = captions["text_encoder"] if isinstance(captions, Mapping) else captions
        states, mask = self.encode_gemma(texts, "text_encoder" in grad)
        return self.connect(states, mask)

    # ---------------------------------------------------------------- training

    def _audio_length(self, latent_frames: int) -> int:
        """The audio latents' length for a clip of `latent_frames` (the pipeline's rule)."""
        frames = (latent_frames - 1) * int(self.vae.temporal_compression_ratio) + 1
        config = self.audio_vae.config
        per_second = float(config.sample_rate) / float(config.mel_hop_length) / float(self.audio_vae.temporal_compression_ratio)
        return max(1, round(frames / self.frame_rate * per_second))

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, F', h, w) for noisy latents at noise fraction `t` (B,); the audio
        stream reads zero latents noised at the same t (its prediction is dropped). A clip that
        starts from its given first frame has timestep 0 on that frame's tokens (start_frame.py)."""
        from diffusers import LTX2Pipeline

        transformer = self.transformer
        config = base_module(transformer).config
        device, dtype = module_device(transformer), input_dtype(transformer)
        b, _, frames, height, width = noisy.shape
        sigma = t.to(device, torch.float32).expand(b)
        audio_length = self._audio_length(frames)
        audio = torch.randn(b, audio_length, config.audio_in_channels, device=device) * sigma.view(b, 1, 1)
        packed = LTX2Pipeline._pack_latents(noisy.to(device, dtype), config.patch_size, config.patch_size_t)
        mask = conditioning["attention_mask"].to(device)
        out = transformer(
            hidden_states=packed, audio_hidden_states=audio.to(dtype),
            encoder_hidden_states=conditioning["encoder_hidden_states"].to(device, dtype),
            audio_encoder_hidden_states=conditioning["audio_encoder_hidden_states"].to(device, dtype),
            timestep=self.per_token_timesteps(sigma * 1000, batch, frames // config.patch_size_t, height // config.patch_size,
                                              width // config.patch_size),
            audio_timestep=sigma * 1000, sigma=sigma * 1000, encoder_attention_mask=mask, audio_encoder_attention_mask=mask,
            num_frames=frames, height=height, width=width, fps=self.frame_rate, audio_num_frames=audio_length,
            use_cross_timestep=False, return_dict=False,
        )[0]
        return LTX2Pipeline._unpack_latents(out, frames // config.patch_size_t, height // config.patch_size, width // config.patch_size,
                                            config.patch_size, config.patch_size_t)

    # ---------------------------------------------------------------- sampling

    def pipeline(self):
        """LTX2Pipeline sharing this model's parts, the connectors, audio VAE and vocoder
        (LTX2ImageToVideoPipeline for a sample that starts from an image)."""
        from diffusers import LTX2ImageToVideoPipeline, LTX2Pipeline

        components = {part: base_module(module) for part, module in self.parts.items()}
        components.update({part: getattr(self, part) for part in EXTRA_PARTS}, tokenizer=self.tokenizer)
        kind = LTX2Pipeline if self._sample_image is None else LTX2ImageToVideoPipeline
        pipe = kind(scheduler=type(self.scheduler).from_config(self.scheduler.config), **components)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Gemma's states for the prompt and the negative prompt (the pipeline runs the connectors)."""
        states, mask = self.encode_gemma([prompt])
        negative, negative_mask = self.encode_gemma([negative_prompt or ""])
        self.connectors.to(states.device)  # the pipeline connects them where they are
        return {"prompt_embeds": states, "prompt_attention_mask": mask, "negative_prompt_embeds": negative,
                "negative_prompt_attention_mask": negative_mask, "guidance_scale": float(cfg_scale)}

    def sample_options(self) -> dict:
        """A clip (VideoSampling: 8k+1 frames) at the run's frame rate, LTX-2.0's CFG alone."""
        return {**super().sample_options(), "frame_rate": self.frame_rate,
                "stg_scale": 0.0, "modality_scale": 1.0, "guidance_rescale": 0.0, "audio_guidance_scale": None,
                "audio_stg_scale": 0.0, "audio_modality_scale": 1.0, "audio_guidance_rescale": 0.0,
                "spatio_temporal_guidance_blocks": None, "use_cross_timestep": False}

    def decode_sample(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Pixels (B, 3, F, H, W) for the pipeline's latent output (denormalised already)."""
        with torch.no_grad():
            return self._decode_raw(latents)

    # ---------------------------------------------------------------- saving

    def save_diffusers(self, directory, dtype) -> Path:
        """A diffusers folder with the connectors, audio VAE and vocoder beside the parts."""
        from ot_gradio.models.common import save_diffusers_folder

        def write_rest(tmp: Path) -> None:
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.scheduler.save_pretrained(tmp / "scheduler")
            for part in EXTRA_PARTS:
                getattr(self, part).save_pretrained(tmp / part, safe_serialization=True)
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)
