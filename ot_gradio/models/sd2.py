"""Stable Diffusion 2.0 / 2.1, the 768 px v-prediction models and the 512 px epsilon "base" ones.

They are SD 1.5 with another text encoder and scheduler: OpenCLIP ViT-H, which diffusers stores
as a `CLIPTextModel` holding only the 23 layers SD 2 uses, so its output (final layer norm
applied) is OpenCLIP's penultimate layer, as the original conditions on; and, for the 768 models,
v-prediction. Everything else (loading, encoding, sampling, saving) is the SD 1.5 code.

A single file carries no scheduler config, so which prediction type it has is a property of the
model type, as in OneTrainer (which loads SD 2.0/2.1 files with `v2-inference-v.yaml` and the
base ones with `v2-inference.yaml`). Diffusers' `from_single_file` without a config assumes every
SD 2 file is the 768 v model (stable-diffusion-2-1), and with a config takes that repo's
scheduler; here the model type decides in either case.
"""

from __future__ import annotations

from pathlib import Path

from ot_gradio.config.enums import ModelType
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd15 import StableDiffusion15


class StableDiffusion2(StableDiffusion15):
    """What every SD 2.x family shares (registered only through its subclasses)."""

    # the prediction type of a single file of this model type
    single_file_prediction_type = "epsilon"

    @classmethod
    def _load_pipeline(cls, name: str, **kwargs):
        return cls._checked_unet_channels(name, super()._load_pipeline(name, **kwargs))

    @classmethod
    def _load_single_file(cls, path: Path, **kwargs):
        pipe = super()._load_single_file(path, **kwargs)
        scheduler = pipe.scheduler
        if scheduler.config.get("prediction_type") != cls.single_file_prediction_type:
            pipe.scheduler = type(scheduler).from_config(scheduler.config, prediction_type=cls.single_file_prediction_type)
        return pipe

    @property
    def lora_base_model_version(self) -> str:
        """kohya's names: "sd_v2" and, for a v-prediction model, "sd_v2_v" (which also marks the
        file `ss_v_parameterization`); both set `ss_v2`, which A1111/Forge read as SD 2."""
        return "sd_v2_v" if self.prediction_type == "v_prediction" else "sd_v2"

    @property
    def modelspec_architecture(self) -> str:
        return "stable-diffusion-v2-768-v" if self.prediction_type == "v_prediction" else "stable-diffusion-v2-512"


class StableDiffusion2V(StableDiffusion2):
    """The 768 px v-prediction models (registered only through their subclasses)."""

    single_file_prediction_type = "v_prediction"


@register_family(ModelType.STABLE_DIFFUSION_20)
class StableDiffusion20(StableDiffusion2V):
    default_config_repo = "stabilityai/stable-diffusion-2"


@register_family(ModelType.STABLE_DIFFUSION_20_BASE)
class StableDiffusion20Base(StableDiffusion2):
    default_config_repo = "stabilityai/stable-diffusion-2-base"


@register_family(ModelType.STABLE_DIFFUSION_21)
class StableDiffusion21(StableDiffusion2V):
    default_config_repo = "stabilityai/stable-diffusion-2-1"


@register_family(ModelType.STABLE_DIFFUSION_21_BASE)
class StableDiffusion21Base(StableDiffusion2):
    default_config_repo = "stabilityai/stable-diffusion-2-1-base"
