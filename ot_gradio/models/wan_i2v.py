"""Wan 2.2 I2V A14B image-to-video: Wan 2.2 T2V A14B's two experts (models/wan.py) whose
transformers read, beside the noisy latents, where the clip starts, as diffusers'
WanImageToVideoPipeline gives it (its `prepare_latents`):

- The first-frame latents: the VAE's mean of the clip's first frame followed by black (zero)
  frames up to the clip's length, normalised as every Wan latent (16 channels, F' latent frames).
  Each training clip's own first frame (after its crop and flip) is that image, so a folder of
  clips trains image-to-video with nothing else beside it; an image trains as a one-frame clip
  that starts from itself. Cached beside the clip's latents (latent cache kind "first_frame").
- A mask of 4 channels: ones on the first latent frame (the frame given), zeros after it.
- The transformer reads [noisy latents, mask, first-frame latents] (36 channels) and predicts
  the velocity of the 16 noisy ones; the loss is the T2V one, over every latent frame.

Samples start from `control_image` of the sample entry (a path or PIL image, fitted to the
sample's size: cut to its aspect ratio, then scaled), blank: the first frame of the first
training clip. Wan 2.2 I2V has no CLIP image encoder: the pipeline sends no `image_embeds`
(Wan 2.1 I2V, models/wan21_i2v.py, reads them too; `WanFirstFrame` is what both share).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import ModelLoadError, base_module, first_frame_conditioning, input_dtype, module_device
from ot_gradio.models.registry import register_family
from ot_gradio.models.sampling_parts import sample_image, start_image_input
from ot_gradio.models.wan import Wan22T2VA14B

MASK_CHANNELS = 4  # the pipeline's mask: the VAE's 4 frames per latent frame, as channels


class WanFirstFrame:
    """What Wan's image-to-video transformers share (Wan 2.2 I2V A14B here, Wan 2.1 I2V in
    models/wan21_i2v.py): 36 channels in, the first frame's latents and mask beside the noise, a
    sample that starts from an image. Listed before the text-to-video class it extends."""

    pipeline_class_name = "WanImageToVideoPipeline"
    conditioning_kind = "first_frame"  # the latent cache holds each variant's first-frame latents (data/batches.py)
    default_control_image: str | None = None  # the trainer sets the first training clip
    clip_image_embeds = False  # Wan 2.1 I2V: the transformer also reads the first frame's CLIP image embeddings
    _sample_image = None  # the start image of the sample being made (sampling_parts.sample_image)

    def _check_image_to_video(self, components: Mapping) -> None:
        for part in ("transformer", "transformer_2"):
            module = components.get(part)
            config = None if module is None else base_module(module).config
            if config is not None and config.in_channels != 2 * config.out_channels + MASK_CHANNELS:
                raise ModelLoadError(
                    f"The {part} reads {config.in_channels} channels for {config.out_channels}: a text-to-video Wan model, "
                    f"not {self.family_name} (it reads {2 * config.out_channels + MASK_CHANNELS}); pick WAN_2_2_T2V_A14B, "
                    "WAN_2_1 or WAN_2_2_TI2V_5B.")
            if config is not None and (config.get("image_dim") is not None) != self.clip_image_embeds:
                raise ModelLoadError(
                    "The transformer reads CLIP image embeddings: a Wan 2.1 I2V model; pick WAN_2_1_I2V." if config.get("image_dim")
                    else "The transformer reads no CLIP image embeddings: a Wan 2.2 I2V A14B model; pick WAN_2_2_I2V_A14B.")

    # ---------------------------------------------------------------- the first frame

    def caches_conditioning(self, masked_training: bool) -> bool:
        return True  # every clip starts from its first frame

    @torch.no_grad()
    def encode_conditioning(self, pixels: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The first-frame latents (B, 16, F', h, w) of clips (B, 3, F, H, W) in [-1, 1] (an image
        (B, 3, H, W): one frame): the VAE's mean of the first frame followed by F - 1 black ones."""
        if pixels.ndim == 4:
            pixels = pixels.unsqueeze(2)
        condition = torch.zeros_like(pixels)
        condition[:, :, 0] = pixels[:, :, 0]
        return self.encode_images(condition, sample=False).float()

    @staticmethod
    def first_frame_mask(latents: torch.Tensor) -> torch.Tensor:
        """The pipeline's mask (B, 4, F', h, w) for latents (B, C, F', h, w): ones on the first latent frame."""
        b, _, frames, h, w = latents.shape
        mask = latents.new_zeros(b, MASK_CHANNELS, frames, h, w)
        mask[:, :, 0] = 1
        return mask

    def first_frame_inputs(self, batch, noisy: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The batch's first-frame latents (cached, else encoded from its pixels; without either, the
        memory planner's probe, zeros of the noisy latents' size stand in) and what else the
        transformer reads of the first frame, by its keyword (Wan 2.1 I2V: the CLIP embeddings)."""
        return first_frame_conditioning(self, batch, torch.zeros_like(noisy)), {}

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, 16, F', h, w) of the noisy latents, read with the first-frame mask and latents."""
        device, dtype = module_device(self.transformer), input_dtype(self.transformer)
        first, more = self.first_frame_inputs(batch, noisy)
        noisy = noisy.to(device, dtype)
        inputs = torch.cat([noisy, self.first_frame_mask(noisy), first.to(device, dtype)], dim=1)
        return super().predict(inputs, t, {**conditioning, **more}, batch)

    # ---------------------------------------------------------------- sampling

    def sample(self, prompt: str, *args, control_image=None, **kwargs):
        """A clip that starts from `control_image` (a path to an image or clip, or a PIL image;
        None: the first frame of the first training clip)."""
        with sample_image(self, control_image, f"{self.family_name} samples start from an image: give the sample one (control_image)"):
            return super().sample(prompt, *args, **kwargs)

    def sampling_inputs(self, height: int, width: int, **inputs) -> dict:
        """The start image cut to the sample's aspect ratio and scaled to its size (the pipeline
        would stretch it)."""
        return {**start_image_input(self, height, width), **super().sampling_inputs(height, width, **inputs)}


@register_family(ModelType.WAN_2_2_I2V_A14B)
class Wan22I2VA14B(WanFirstFrame, Wan22T2VA14B):
    """The family interface for Wan 2.2 I2V A14B (see the module's text)."""

    def __init__(self, components: Mapping, boundary_ratio: float = 0.9):
        self._check_image_to_video(components)
        super().__init__(components, boundary_ratio)

    @classmethod
    def _from_pipeline(cls, pipe):
        return cls(pipe.components, pipe.config.get("boundary_ratio") or 0.9)
