"""Rotation and colour augmentation: what a concept asks for, and one draw of it.

As in OneTrainer, each augmentation has a random and a fixed switch and one maximum: random draws
uniformly within the maximum (and wins when both are on), fixed always applies the maximum.
Rotation: an angle in [-max, max] degrees. Brightness, contrast and saturation: a factor in
[1 - max, 1 + max] (fixed: 1 + max), 1 = unchanged. Hue: a shift of the colour wheel in
[-max/2, max/2] turns (fixed: max/2). Rotation also turns the mask; colour never touches it.

Drawn values are rounded (0.01 degree, 1e-4 otherwise): the latent cache keys on them, and the
rounded value is also what is rendered, so a key always names exactly the pixels it holds.
No torch here: planning and the page's summary use this module; ``pixels`` applies a draw.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .mask_augment import MaskDraw


@dataclass(frozen=True)
class Augment:
    """One draw: the rotation in degrees (counter-clockwise), the colour factors and, with masked
    training, the mask augmentations' draw (mask_augment.py), which comes first."""

    angle: float = 0.0
    brightness: float = 1.0
    contrast: float = 1.0
    saturation: float = 1.0
    hue: float = 0.0
    mask: MaskDraw | None = None

    @property
    def identity(self) -> bool:
        return self == IDENTITY

    def key(self) -> list:
        values = [self.angle, self.brightness, self.contrast, self.saturation, self.hue]
        return values if self.mask is None else [*values, self.mask.key()]


IDENTITY = Augment()

# field of Augment -> (word in the enable_random_<word> / enable_fixed_<word> options, maximum option)
_OPTIONS = {
    "angle": ("rotate", "random_rotate_max_angle"),
    "brightness": ("brightness", "random_brightness_max_strength"),
    "contrast": ("contrast", "random_contrast_max_strength"),
    "saturation": ("saturation", "random_saturation_max_strength"),
    "hue": ("hue", "random_hue_max_strength"),
}


@dataclass(frozen=True)
class Setting:
    mode: str  # "off", "fixed" or "random"
    maximum: float


@dataclass(frozen=True)
class AugmentSettings:
    angle: Setting = Setting("off", 0.0)
    brightness: Setting = Setting("off", 0.0)
    contrast: Setting = Setting("off", 0.0)
    saturation: Setting = Setting("off", 0.0)
    hue: Setting = Setting("off", 0.0)

    @classmethod
    def from_config(cls, image: object | None) -> AugmentSettings:
        if image is None:
            return cls()
        settings = {}
        for name, (word, maximum) in _OPTIONS.items():
            if getattr(image, f"enable_random_{word}", False):
                mode = "random"
            elif getattr(image, f"enable_fixed_{word}", False):
                mode = "fixed"
            else:
                mode = "off"
            settings[name] = Setting(mode, abs(float(getattr(image, maximum, 0.0))))
        return cls(**settings)

    @property
    def random(self) -> bool:
        """Does a draw depend on the random stream (so variations differ)?"""
        return any(getattr(self, name).mode == "random" and getattr(self, name).maximum > 0 for name in _OPTIONS)

    def draw(self, rng: random.Random) -> Augment:
        """One draw; takes numbers from ``rng`` only for random settings."""
        values = {}
        for name in _OPTIONS:
            setting: Setting = getattr(self, name)
            if setting.mode == "off" or setting.maximum == 0:
                continue
            spread = setting.maximum / 2 if name == "hue" else setting.maximum
            if setting.mode == "random":
                delta = rng.uniform(-spread, spread)
            else:
                delta = spread
            if name == "angle":
                values[name] = round(delta, 2)
            elif name == "hue":
                values[name] = round(max(-0.5, min(0.5, delta)), 4)
            else:
                values[name] = round(max(0.0, 1.0 + delta), 4)
        return Augment(**values)
