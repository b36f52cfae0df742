"""Masked training: which latent pixels a step learns from.

The batch's mask (pixel resolution, 1 = learn here) is averaged down to the latent grid, so a
latent pixel counts as much as the share of its 8x8 image patch that is white, as kohya's masked
loss ("area"). OneTrainer scales it with antialiased bilinear, which gives the latent pixels beside
a mask's edge an eighth of the weight across it: a latent pixel wholly outside the mask then still
learns a little, which *Unmasked weight* 0 is meant to rule out. Masks are read
from their files for every batch, so this works the same with latent caching on.

`unmasked_probability` is drawn per sample, for every model, as OneTrainer's tooltip describes
(its code draws it for inpainting models only; the option's tooltip says so): that share of
samples trains on the whole image (mask all white) — with batch size 1, that share of steps.
Inpainting models' loss is masked too (OneTrainer's is not, a limitation its code marks to be
fixed). Samples without a
mask file train on the whole image. How much the black area still counts is the loss's
`unmasked_weight` (see loss.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def latent_mask(mask: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """[B, 1, H, W] pixel mask -> [B, 1, h, w] at the latents' size (area average)."""
    mask = mask.float()
    if tuple(mask.shape[-2:]) == tuple(size):
        return mask
    return F.interpolate(mask, size=tuple(size), mode="area")


def training_mask(
    mask: torch.Tensor | None,
    latent_size: tuple[int, int],
    *,
    unmasked_probability: float,
    device: torch.device,
    rand: Callable[[int], torch.Tensor] = torch.rand,
) -> torch.Tensor | None:
    """The latent mask the loss uses this step, or None to learn from every pixel. `rand(n)`
    draws the per-sample chances (multi-GPU: this process's share of a global-batch draw)."""
    if mask is None:
        return None
    out = latent_mask(mask, latent_size).to(device)
    if unmasked_probability > 0:
        whole = rand(out.shape[0]) < unmasked_probability
        out[whole.to(device)] = 1.0
    return out


def conditions_on_images(config: Any) -> bool:
    """Whether an inpainting model's conditioning images come from the data (the masked images of
    masked training, or `-condlabel` images with custom_conditioning_image), so the latent cache
    holds them too; without either every sample's is blank."""
    return bool(config.masked_training or config.custom_conditioning_image)


def condlabel_images(config: Any, model: Any) -> bool:
    """custom_conditioning_image on an inpainting model: an image's `-condlabel` image is its
    conditioning image (the doctor refuses the option for the other families)."""
    return bool(config.custom_conditioning_image and model.inpainting)
