"""The inpainting models of SD 1.5 and SD 2.0: a UNet with 9 input channels.

Input, in the order diffusers' StableDiffusionInpaintPipeline and OneTrainer use: the noisy
latents (4), the mask at latent size (1, 1 = repaint here) and the VAE latents of the masked
image (4). What training feeds them is what OneTrainer does:
- The mask is the concept's `-masklabel.png` when masked training is on, else a white mask over
  the whole image (OneTrainer makes no random masks). The loss uses the same latent mask.
- The masked image is the image with the mask's area set to mid grey (0 in the VAE's [-1, 1]),
  `pixels * (1 - mask)` with the soft mask as it was resized; its latents are the VAE's mean
  (not a sample), scaled like the image latents.
- With `unmasked_probability`, a sample trains on the whole image: its mask becomes all white
  and its masked image blank. Here any sample whose latent mask is all white gets the latents
  of a blank image, which is what a white mask makes of any image.
With custom_conditioning_image, an image's `-condlabel` image (data/scan.py) is its conditioning
image instead of the masked image, taken as it is (also for a sample trained on the whole image).
With latent caching, the masked images' latents are cached beside the image latents (see
data/batches.py); without it they are encoded each step from the batch's pixels and mask.

Samples inpaint a sample's base image inside its mask when `sample_inpainting` is on; otherwise
they are text-to-image through the inpainting pipeline with a blank image and a full mask, as
OneTrainer's sampler does for inpainting models.
"""

from __future__ import annotations

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import conditioning_image_latents, inpainting_images
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd2 import StableDiffusion2
from ot_gradio.models.sd15 import StableDiffusion15

MASK_CHANNELS = 1


class InpaintingMixin:
    """The inpainting inputs on top of a Stable Diffusion family (put it first in the bases)."""

    inpainting = True
    unet_in_channels = 4 + MASK_CHANNELS + 4
    pipeline_class_name = "StableDiffusionInpaintPipeline"

    @classmethod
    def _load_pipeline(cls, name: str, **kwargs):
        return cls._checked_unet_channels(name, super()._load_pipeline(name, **kwargs))

    def pipeline(self, sampler=None):
        """The inpainting pipeline sharing this model's components (and so the model_index.json
        of a saved diffusers folder names it)."""
        from diffusers import StableDiffusionInpaintPipeline

        pipe = super().pipeline(sampler)
        if not isinstance(pipe, StableDiffusionInpaintPipeline):
            pipe = StableDiffusionInpaintPipeline.from_pipe(pipe)
            pipe.set_progress_bar_config(disable=True)
        return pipe

    def sampling_inputs(self, height: int, width: int, image=None, mask=None) -> dict:
        """The sample's base image and mask (white = repaint), or text-to-image (full mask)."""
        return inpainting_images(height, width, image, mask)

    # ---------------------------------------------------------------- training inputs

    @torch.no_grad()
    def encode_conditioning(self, pixels: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Latents of the masked image for pixels in [-1, 1] (B, 3, H, W) and a pixel mask in
        [0, 1] (B, 1, H, W; 1 = repaint, None = everything)."""
        if mask is None:
            mask = torch.ones_like(pixels[:, :1])
        masked = pixels.float() * (1.0 - mask.to(pixels.device, torch.float32))
        return self.encode_images(masked, sample=False).float()

    @torch.no_grad()
    def blank_latents(self, height: int, width: int) -> torch.Tensor:
        """(1, 4, height, width) latents of an all-masked (blank) image at this latent size."""
        cache = self.__dict__.setdefault("_blank_latents", {})
        if (height, width) not in cache:
            step = self.vae_scale_factor
            pixels = torch.zeros(1, 3, height * step, width * step)
            cache[(height, width)] = self.encode_images(pixels, sample=False).float().cpu()
        return cache[(height, width)]

    def conditioning_input(self, noisy_latents: torch.Tensor, batch=None) -> torch.Tensor:
        """The mask and masked-image latents (B, 5, h, w) that go beside the noisy latents.

        `batch.latent_mask` is the latent mask of this step (the training step sets it; None
        means the whole image); masked-image latents come from `batch.conditioning_latents`
        (latent cache) or are encoded from `batch.pixels` and `batch.mask`."""
        n, _, h, w = noisy_latents.shape
        device = noisy_latents.device
        mask = getattr(batch, "latent_mask", None)
        if mask is None:
            mask = torch.ones(n, MASK_CHANNELS, h, w, device=device)
        mask = mask.to(device, torch.float32)
        if tuple(mask.shape) != (n, MASK_CHANNELS, h, w):
            raise ValueError(f"the inpainting mask has shape {tuple(mask.shape)}; expected {(n, MASK_CHANNELS, h, w)}")
        blank = self.blank_latents(h, w).to(device).expand(n, -1, -1, -1)
        whole = mask.flatten(1).amin(dim=1) >= 1.0
        return torch.cat([mask, conditioning_image_latents(self, batch, blank, whole)], dim=1)

    def predict(self, noisy_latents: torch.Tensor, timesteps: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The UNet's output for the noisy latents with the mask and masked-image latents beside them."""
        extra = self.conditioning_input(noisy_latents, batch)
        return super().predict(torch.cat([noisy_latents, extra.to(noisy_latents.dtype)], dim=1), timesteps, conditioning, batch)


@register_family(ModelType.STABLE_DIFFUSION_15_INPAINTING)
class StableDiffusion15Inpainting(InpaintingMixin, StableDiffusion15):
    default_config_repo = "stable-diffusion-v1-5/stable-diffusion-inpainting"


@register_family(ModelType.STABLE_DIFFUSION_20_INPAINTING)
class StableDiffusion20Inpainting(InpaintingMixin, StableDiffusion2):
    default_config_repo = "stabilityai/stable-diffusion-2-inpainting"
