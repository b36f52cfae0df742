"""Flux.1 Fill dev: Flux.1 dev (models/flux.py) whose transformer also reads the image to fill
and the mask, as OneTrainer's Flux setup and diffusers' FluxFillPipeline feed them.

The transformer's 384 input values per 2x2 patch token are, in this order: the noisy latents
(16 channels), the latents of the masked image (16) and the pixel mask folded to latent size
(the 8x8 pixels under each latent pixel as 64 channels), each packed 2x2 (64 + 64 + 256).
What training feeds them is OneTrainer's:
- The mask is the concept's `-masklabel.png` (masked training; 1 = fill here). An image without a
  mask file gets a white mask (the whole image is filled), and so does a sample drawn by
  `unmasked_probability`. OneTrainer makes no random masks, so a Fill run without masked
  training would only learn text-to-image through a blank image: the doctor refuses it
  (config/doctor.py) and asks for masked training and mask files.
- The masked image is the image with the mask's area set to mid grey, `pixels * (1 - mask)`; its
  latents are the VAE's mean, shifted and scaled like the image latents (cached with latent
  caching, see data/batches.py). A white mask's masked image is blank.
- The loss is weighted by the latent mask (`unmasked_weight` outside it), as for the other
  inpainting families here; OneTrainer's loss leaves the mask out for inpainting models.

Sampling: with an image and a mask (`sample(..., image=, mask=)`, files or PIL images) the
pipeline fills the mask's white area; without them it fills a blank image entirely, the
text-to-image sample OneTrainer's Fill sampler makes.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import ModelLoadError, base_module, conditioning_image_latents, inpainting_images, module_dtype
from ot_gradio.models.flux import FluxDev1
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd_inpainting import InpaintingMixin


def fold_mask(mask: torch.Tensor, scale: int) -> torch.Tensor:
    """(B, 1, H, W) pixel mask -> (B, scale * scale, H / scale, W / scale): channel dy * scale + dx
    holds pixel (dy, dx) of each scale x scale block (the pipeline's and OneTrainer's order)."""
    return F.pixel_unshuffle(mask, scale)


def transformer_in_channels(latent_channels: int, scale: int) -> int:
    """Input values per 2x2 token: noisy and masked-image latents, and the folded mask."""
    return 4 * (2 * latent_channels + scale * scale)


@register_family(ModelType.FLUX_FILL_DEV_1)
class FluxFillDev1(FluxDev1):
    modelspec_architecture = "flux-1-dev/fill"  # the transformer alone in BFL's layout (`flux1-fill-dev.safetensors`)

    # the masked image's latents, and those of a blank image, as for the SD inpainting models
    encode_conditioning = InpaintingMixin.encode_conditioning
    blank_latents = InpaintingMixin.blank_latents

    pipeline_class_name = "FluxFillPipeline"

    @classmethod
    def load(cls, name: str, **kwargs):
        model = super().load(name, **kwargs)
        expected = transformer_in_channels(model.vae.config.latent_channels, model.vae_scale_factor)
        got = base_module(model.transformer).config.in_channels
        if got != expected:
            raise ModelLoadError(
                f"'{name}' is not a Flux.1 Fill model: its transformer reads {got} input channels, Fill reads {expected} "
                "(image, masked image and mask). Pick the model type that matches the model (FLUX_DEV_1 for Flux.1 dev)."
            )
        return model

    # ---------------------------------------------------------------- training

    def fill_inputs(self, noisy: torch.Tensor, batch=None) -> torch.Tensor:
        """The masked-image latents and the folded mask (B, 16 + 64, h, w) that go beside the
        noisy latents. `batch.latent_mask` is the step's latent mask (None = fill everything);
        a sample whose latent mask is all white gets a white mask and a blank image."""
        n, _, h, w = noisy.shape
        device, scale = noisy.device, self.vae_scale_factor
        blank = self.blank_latents(h, w).to(device).expand(n, -1, -1, -1)
        white = torch.ones(n, scale * scale, h, w, device=device)
        latent_mask = getattr(batch, "latent_mask", None)
        if latent_mask is None and getattr(batch, "custom_conditioning", None) is None:
            return torch.cat([blank, white], dim=1)
        if latent_mask is None:
            whole = torch.ones(n, dtype=torch.bool, device=device)
        else:
            whole = (latent_mask.flatten(1).amin(dim=1) >= 1.0).to(device)
        latents = conditioning_image_latents(self, batch, blank, whole)  # a -condlabel image with custom_conditioning_image
        if bool(whole.all()):
            return torch.cat([latents, white], dim=1)
        pixel_mask = batch.mask.to(device, torch.float32)
        if tuple(pixel_mask.shape) != (n, 1, h * scale, w * scale):
            raise ValueError(f"the Fill mask has shape {tuple(pixel_mask.shape)}; expected {(n, 1, h * scale, w * scale)}")
        return torch.cat([latents, torch.where(whole[:, None, None, None], white, fold_mask(pixel_mask, scale))], dim=1)

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        extra = self.fill_inputs(noisy, batch).to(noisy.dtype)
        return super().predict(torch.cat([noisy, extra], dim=1), t, conditioning, batch)

    # ---------------------------------------------------------------- sampling and saving

    def sampling_inputs(self, height: int, width: int, image=None, mask=None) -> dict:
        """The image to fill and its mask (white = fill), resized to the sample's size; neither =
        fill a blank image entirely (models/common.inpainting_images)."""
        return inpainting_images(height, width, image, mask)

    def sample(self, prompt: str, *args, **kwargs):
        with _encoder_in_own_dtype(self.vae):
            return super().sample(prompt, *args, **kwargs)


@contextlib.contextmanager
def _encoder_in_own_dtype(vae: torch.nn.Module):
    """FluxFillPipeline hands the VAE its images in the transformer's dtype (bfloat16 beside a
    float32 VAE, say): the encoder computes in its own dtype and hands back the caller's."""
    encoder = base_module(vae).encoder
    own, caller = module_dtype(encoder), {}

    def before(_module, args):
        caller["dtype"] = args[0].dtype
        return (args[0].to(own), *args[1:])

    hooks = (encoder.register_forward_pre_hook(before),
             encoder.register_forward_hook(lambda _module, _args, out: out.to(caller["dtype"])))
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
