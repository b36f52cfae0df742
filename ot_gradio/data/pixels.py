"""Images to tensors, with the colour part of an augmentation applied on the way.

Colour works on float RGB in [0, 1] with the formulas torchvision uses (which OneTrainer calls):
brightness scales, contrast blends with the mean grey level, saturation blends with the per-pixel
grey, hue rotates H in HSV; each result is clipped to [0, 1]. Order as in OneTrainer: brightness,
contrast, saturation, hue. The output is in [-1, 1], what SD VAEs expect.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from .augment import IDENTITY, Augment


def _grey(x: torch.Tensor) -> torch.Tensor:
    r, g, b = x.unbind(0)
    return (0.2989 * r + 0.587 * g + 0.114 * b).unsqueeze(0)


def _blend(x: torch.Tensor, other: torch.Tensor, factor: float) -> torch.Tensor:
    return (factor * x + (1.0 - factor) * other).clamp_(0.0, 1.0)


def shift_hue(x: torch.Tensor, shift: float) -> torch.Tensor:
    """Rotate the hue of float RGB [3, H, W] in [0, 1] by ``shift`` turns of the colour wheel."""
    maxc, _ = x.max(0)
    minc, _ = x.min(0)
    chroma = maxc - minc
    grey = chroma == 0
    safe = torch.where(grey, torch.ones_like(chroma), chroma)
    r, g, b = x.unbind(0)
    rc, gc, bc = (maxc - r) / safe, (maxc - g) / safe, (maxc - b) / safe
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(grey, torch.zeros_like(h), h)
    h = torch.remainder(h / 6.0 + shift, 1.0)
    s = torch.where(grey, torch.zeros_like(chroma), chroma / torch.where(maxc == 0, torch.ones_like(maxc), maxc))
    v = maxc
    h6 = h * 6.0
    sector = torch.floor(h6).long() % 6
    f = h6 - torch.floor(h6)
    p = (v * (1.0 - s)).clamp(0.0, 1.0)
    q = (v * (1.0 - s * f)).clamp(0.0, 1.0)
    t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0)
    table = (
        (v, t, p),
        (q, v, p),
        (p, v, t),
        (p, q, v),
        (t, p, v),
        (v, p, q),
    )
    out = torch.empty_like(x)
    for channel in range(3):
        choices = torch.stack([row[channel] for row in table])
        out[channel] = choices.gather(0, sector.unsqueeze(0)).squeeze(0)
    return out


def adjust_colour(x: torch.Tensor, augment: Augment) -> torch.Tensor:
    """Float RGB [3, H, W] in [0, 1] -> the same with the draw's colour changes."""
    if augment.brightness != 1.0:
        x = (x * augment.brightness).clamp_(0.0, 1.0)
    if augment.contrast != 1.0:
        x = _blend(x, _grey(x).mean(), augment.contrast)
    if augment.saturation != 1.0:
        x = _blend(x, _grey(x), augment.saturation)
    if augment.hue != 0.0:
        x = shift_hue(x, augment.hue)
    return x


def pixels_tensor(img: Image.Image, augment: Augment = IDENTITY) -> torch.Tensor:
    """RGB image -> float32 [3, H, W] in [-1, 1], colour augmented."""
    arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
    x = torch.from_numpy(arr.copy()).permute(2, 0, 1).float()
    if augment.identity:
        return x.div_(127.5).sub_(1.0)
    return adjust_colour(x.div_(255.0), augment).mul_(2.0).sub_(1.0)


def mask_tensor(img: Image.Image) -> torch.Tensor:
    """Greyscale mask -> float32 [1, H, W] in [0, 1]."""
    arr = np.asarray(img.convert("L"), dtype=np.uint8)
    return torch.from_numpy(arr.copy()).unsqueeze(0).float().div_(255.0)
