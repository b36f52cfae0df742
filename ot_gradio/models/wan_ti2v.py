"""Wan 2.2 TI2V 5B: one transformer that makes a clip from a prompt (text-to-video) or from a
prompt and the clip's first frame (image-to-video), Wan 2.1's interface (models/wan.py) with Wan
2.2's VAE (48 latent channels, 16x per side, its own latents_mean / std, all read from the folder)
and a 5B transformer of 48 channels. The repo samples at flow_shift 5; training draws t at the same
shift.

How the model reads a first frame (diffusers' WanImageToVideoPipeline with `expand_timesteps`,
its "wan 2.2 5b i2v"): no extra input channels; the first latent frame of the noisy latents is
replaced by the image's latents (the VAE's mean of the image alone, normalised as every latent:
the causal VAE encodes a clip's first frame alone too), and each latent token gets its own
timestep, 0 on that frame (the frame is clean) and the step's elsewhere. A text-to-video clip
gives every token the same one, so it passes one timestep per clip, the same sum.

Training, `image_to_video_share` (0 to 1): that fraction of the training clips starts from its
own first frame (drawn per clip and step; an image, one latent frame, always trains
text-to-video). For those, training/first_frame.py puts the frame in the noisy latents, this
module gives its tokens timestep 0, and the loss counts the frames after it only (their mean),
as DiffSynth-Studio trains the model. The first frames' latents are cached beside the clips'
(latent cache kind "first_frame") while the share is above 0.

Samples: a sample with a control image (a path, a clip's first frame, or a PIL image) starts from
it (WanImageToVideoPipeline on the same parts); with a share of 1 every sample does, blank: the
first training clip's first frame (the trainer sets it); otherwise a sample is text-to-video.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import base_module
from ot_gradio.models.registry import register_family
from ot_gradio.models.sampling_parts import sample_image, start_image_input
from ot_gradio.models.wan import Wan21


@register_family(ModelType.WAN_2_2_TI2V_5B)
class Wan22TI2V5B(Wan21):
    """The family interface for Wan 2.2 TI2V 5B (see the module's text)."""

    pipeline_config_keys = ("expand_timesteps",)  # the hub's model_index.json: true, kept in a saved folder
    conditioning_kind = "first_frame"  # with a share above 0 the latent cache holds each variant's first frame
    default_control_image: str | None = None  # share 1: the trainer sets the first training clip

    def __init__(self, components: Mapping):
        super().__init__(components)
        self._sample_image = None

    def configure_flow(self, config) -> None:
        """The run's image-to-video share, then Wan 2.1's options."""
        self.image_to_video_share = float(getattr(config, "image_to_video_share", 0.0) or 0.0)
        super().configure_flow(config)

    # ---------------------------------------------------------------- the first frame

    def caches_conditioning(self, masked_training: bool) -> bool:
        return self.image_to_video_share > 0

    @torch.no_grad()
    def encode_conditioning(self, pixels: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The first frame's latents (B, 48, 1, h, w) of clips (B, 3, F, H, W) in [-1, 1] (an
        image (B, 3, H, W): itself): the VAE's mean of that frame alone, as the pipeline encodes
        the image a clip starts from."""
        if pixels.ndim == 4:
            pixels = pixels.unsqueeze(2)
        return self.encode_images(pixels[:, :, :1], sample=False).float()

    def given_first_frame(self, batch, latents: torch.Tensor) -> torch.Tensor:
        """The clean first latent frame (B, C, 1, h, w) a clip starts from: cached, else encoded
        from the batch's pixels; without either (the memory planner's probe) the clip's own."""
        cached = getattr(batch, "conditioning_latents", None)
        if cached is not None:
            return cached
        pixels = getattr(batch, "pixels", None)
        if pixels is not None:
            return self.encode_conditioning(pixels)
        return latents[:, :, :1]

    def transformer_timestep(self, noisy: torch.Tensor, timestep: torch.Tensor, batch=None) -> torch.Tensor:
        """Per token (B, F' * h/2 * w/2) where a clip of the batch starts from its given first
        frame: 0 on that frame's tokens for those clips, the clip's timestep elsewhere (the
        pipeline's `first_frame_mask[:, ::2, ::2] * t`, flattened frame by row by column); else one per clip."""
        rows = getattr(batch, "given_first_frame", None)
        if rows is None:
            return timestep
        _, ph, pw = base_module(self.transformer).config.patch_size
        b, frames, h, w = noisy.shape[0], noisy.shape[2], noisy.shape[3] // ph, noisy.shape[4] // pw
        first = torch.arange(frames, device=timestep.device).view(1, frames, 1, 1) == 0
        given = rows.to(timestep.device).view(b, 1, 1, 1) & first
        per_token = torch.where(given, torch.zeros_like(timestep).view(b, 1, 1, 1), timestep.view(b, 1, 1, 1))
        return per_token.expand(b, frames, h, w).reshape(b, -1)

    # ---------------------------------------------------------------- sampling

    def sample(self, prompt: str, *args, control_image=None, **kwargs):
        """A clip from the prompt, or one that starts from `control_image` (a path to an image or a
        clip, or a PIL image; blank: the trainer's default, set when every clip trains image-to-video)."""
        if control_image in (None, "") and self.default_control_image is None:
            return super().sample(prompt, *args, **kwargs)
        with sample_image(self, control_image, "no start image"):
            return super().sample(prompt, *args, **kwargs)

    def pipeline(self):
        """WanPipeline; for a sample that starts from an image, WanImageToVideoPipeline on the same
        parts with `expand_timesteps` (the first frame given, at timestep 0)."""
        pipe = super().pipeline()
        if self._sample_image is None:
            return pipe
        from diffusers import WanImageToVideoPipeline

        i2v = WanImageToVideoPipeline(tokenizer=pipe.tokenizer, text_encoder=pipe.text_encoder, vae=pipe.vae,
                                      scheduler=pipe.scheduler, transformer=pipe.transformer, expand_timesteps=True)
        i2v.set_progress_bar_config(disable=True)
        return i2v

    def sampling_inputs(self, height: int, width: int, **inputs) -> dict:
        """The start image, if any, cut to the sample's aspect ratio and scaled to its size."""
        return {**start_image_input(self, height, width), **super().sampling_inputs(height, width, **inputs)}
