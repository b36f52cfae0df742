"""A video model that makes a clip from a prompt or from a prompt and its first frame, with one
transformer and no extra input: Wan 2.2 TI2V 5B (WanImageToVideoPipeline with `expand_timesteps`)
and LTX-2 (LTX2ImageToVideoPipeline). Both pipelines run image-to-video the same way: the first
latent frame is the image's latents (the VAE's mean of the image alone, normalised as every latent:
the causal VAEs encode a clip's first frame alone too), clean, and each latent token gets its own
timestep, 0 on that frame's tokens and the step's elsewhere.

Training, `image_to_video_share` (0 to 1): that fraction of the clips starts from its own first
frame (training/first_frame.py draws them and leaves the frame out of their loss); the family reads
`per_token_timesteps` for the transformer. The first frames' latents are cached beside the clips'
(latent cache kind "first_frame") while the share is above 0.

Samples: a sample with a control image (a path, a clip's first frame, or a PIL image) starts from
it, in the family's image-to-video pipeline (`self._sample_image` is set while it runs); with a share
of 1 every sample does, blank: the first training clip's first frame (the trainer sets it);
otherwise a sample is text-to-video.
"""

from __future__ import annotations

import torch

from ot_gradio.models.common import first_frame_conditioning
from ot_gradio.models.sampling_parts import sample_image, start_image_input


class StartFromFirstFrame:
    """Mix in before the family's class (see the module's text)."""

    conditioning_kind = "first_frame"  # with a share above 0 the latent cache holds each variant's first frame
    default_control_image: str | None = None  # share 1: the trainer sets the first training clip
    _sample_image = None  # the image the sample being drawn starts from (sampling_parts.sample_image)

    def configure_flow(self, config) -> None:
        """The run's image-to-video share, then the family's options."""
        self.image_to_video_share = float(getattr(config, "image_to_video_share", 0.0) or 0.0)
        super().configure_flow(config)

    def caches_conditioning(self, masked_training: bool) -> bool:
        return self.image_to_video_share > 0

    @torch.no_grad()
    def encode_conditioning(self, pixels: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The first frame's latents (B, C, 1, h, w) of clips (B, 3, F, H, W) in [-1, 1] (an image
        (B, 3, H, W): itself): the VAE's mean of that frame alone, as the pipelines encode the image
        a clip starts from."""
        if pixels.ndim == 4:
            pixels = pixels.unsqueeze(2)
        return self.encode_images(pixels[:, :, :1], sample=False).float()

    def given_first_frame(self, batch, latents: torch.Tensor) -> torch.Tensor:
        """The clean first latent frame (B, C, 1, h, w) a clip starts from: cached, else encoded
        from the batch's pixels; without either (the memory planner's probe) the clip's own."""
        return first_frame_conditioning(self, batch, latents[:, :, :1])

    @staticmethod
    def per_token_timesteps(timestep: torch.Tensor, batch, frames: int, height: int, width: int) -> torch.Tensor:
        """`timestep` (B,) per token (B, frames * height * width, frame by row by column) where a
        clip of the batch starts from its given first frame: 0 on that frame's tokens for those
        clips, the clip's timestep elsewhere; else `timestep` as it is."""
        rows = getattr(batch, "given_first_frame", None)
        if rows is None:
            return timestep
        b = timestep.shape[0]
        first = torch.arange(frames, device=timestep.device).view(1, frames, 1, 1) == 0
        given = rows.to(timestep.device).view(b, 1, 1, 1) & first
        per_token = torch.where(given, torch.zeros_like(timestep).view(b, 1, 1, 1), timestep.view(b, 1, 1, 1))
        return per_token.expand(b, frames, height, width).reshape(b, -1)

    # ---------------------------------------------------------------- sampling

    def sample(self, prompt: str, *args, control_image=None, **kwargs):
        """A clip from the prompt, or one that starts from `control_image` (a path to an image or a
        clip, or a PIL image; blank: the trainer's default, set when every clip trains image-to-video)."""
        if control_image in (None, "") and self.default_control_image is None:
            return super().sample(prompt, *args, **kwargs)
        with sample_image(self, control_image, "no start image"):
            return super().sample(prompt, *args, **kwargs)

    def sampling_inputs(self, height: int, width: int, **inputs) -> dict:
        """The start image, if any, cut to the sample's aspect ratio and scaled to its size."""
        return {**start_image_input(self, height, width), **super().sampling_inputs(height, width, **inputs)}
