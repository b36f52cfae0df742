"""NaN or inf latents: the advice names the type the VAE encodes in and the setting to change, and
a step that encodes without the latent cache stops on them too, naming the image."""

from __future__ import annotations

import torch

from ot_gradio.config.doctor import SDXL_FP16_VAE
from ot_gradio.config.schema import TrainConfig
from ot_gradio.models.registry import get_family
from ot_gradio.training.vae_advice import nonfinite_latents_hint

SD15, SDXL = "STABLE_DIFFUSION_15", "STABLE_DIFFUSION_XL_10_BASE"


def _model(model_type: str, vae_dtype: torch.dtype):
    return get_family(model_type).load("tiny:sd15" if model_type == SD15 else "tiny:sdxl", dtypes={"vae": vae_dtype})


def _config(model_type: str, **vae) -> TrainConfig:
    return TrainConfig.model_validate({"model_type": model_type, "concepts": [], "samples": [], "vae": vae})


def test_the_advice_follows_the_type_the_vae_encodes_in():
    sdxl = _model(SDXL, torch.float16)
    assert nonfinite_latents_hint(sdxl, _config(SDXL, weight_dtype="FLOAT_16")).endswith(SDXL_FP16_VAE)  # the doctor's words
    fixed = nonfinite_latents_hint(sdxl, _config(SDXL, weight_dtype="FLOAT_16", model_name="madebyollin/sdxl-vae-fp16-fix"))
    assert "set vae.weight_dtype to FLOAT_32." in fixed and "such as" not in fixed
    sd15 = _model(SD15, torch.bfloat16)
    assert nonfinite_latents_hint(sd15, _config(SD15, weight_dtype="BFLOAT_16")) == (
        "the VAE encodes in bfloat16 (vae.weight_dtype BFLOAT_16), which can overflow: set vae.weight_dtype to FLOAT_32.")
    sd15.vae.to(torch.float32)  # what it encodes in now, whatever the setting said (a CPU loads FLOAT_16 in float32)
    said = nonfinite_latents_hint(sd15, _config(SD15, weight_dtype="FLOAT_16"))
    assert said.startswith("the VAE encodes in float32 (vae.weight_dtype FLOAT_16), so the image or the VAE's weights are at fault")
