"""What to tell the user when the VAE makes NaN or inf latents (data/latent_cache.nonfinite_error):
the type it encodes in, read from its weights as it encodes, and the setting to change. The
commonest case, SDXL's own VAE in float16, is told in the doctor's words (config/doctor.py)."""

from __future__ import annotations

from typing import Any

import torch

from ..config.doctor import SDXL_FP16_VAE, SDXL_TYPES
from ..config.enums import DataType
from ..models.common import module_dtype

# the part that makes a family's latents: a VAE, or Würstchen's and Stable Cascade's EfficientNet encoder
IMAGE_ENCODERS = {"vae": "the VAE", "effnet_encoder": "the EffNet encoder"}


def nonfinite_latents_hint(model: Any, config: Any) -> str:
    """'the VAE encodes in float16 (vae.weight_dtype FLOAT_16). <what to change>' ('' without an image encoder)."""
    part = next((p for p in IMAGE_ENCODERS if p in model.parts), None)
    if part is None:
        return ""
    name, setting, section = IMAGE_ENCODERS[part], f"{part}.weight_dtype", getattr(config, part, None)
    dtype = module_dtype(model.parts[part])
    said = f"{name} encodes in {str(dtype).removeprefix('torch.')}"
    if section is not None:  # on a CPU a FLOAT_16 part loads in float32: both are said
        said += f" ({setting} {DataType(section.weight_dtype).value})"
    if dtype == torch.float16 and config.model_type in SDXL_TYPES:
        if not config.vae.model_name:
            return f"{said}. {SDXL_FP16_VAE}"
        other = "" if "fp16-fix" in config.vae.model_name else (", or the VAE model to one that works in half precision, "
                                                                 "such as madebyollin/sdxl-vae-fp16-fix")
        return f"{said}, in which an SDXL VAE overflows unless it is made for it: set {setting} to FLOAT_32{other}."
    if dtype != torch.float32:
        return f"{said}, which can overflow: set {setting} to FLOAT_32."
    return (f"{said}, so the image or {name}'s weights are at fault: check that the image opens and looks right, "
            f"and the {name.removeprefix('the ')} model ({part}.model_name, or the base model's).")
