"""OneTrainer's defaults of a sample entry per model type (its SampleConfig._get_model_defaults),
for the fields a OneTrainer samples file leaves out: OneTrainer reads such a file with the model
type's defaults, where our own SampleConfig has one default for every model."""

from __future__ import annotations

from typing import Any

CHROMA_NEGATIVE = ("This low-quality, greyscale, unfinished sketch is inaccurate and flawed. The image is very blurred and "
                   "lacks detail, with excessive chromatic aberrations and artifacts. The image is overly saturated with "
                   "excessive bloom.")
ANIMA_NEGATIVE = "worst quality, low quality, score_1, score_2, score_3, artist name"

# model type prefix -> (width, height, steps, cfg scale, noise scheduler, negative prompt); None: OneTrainer's general one
_BY_PREFIX: list[tuple[str, tuple[int, int, int, float, str | None, str]]] = [
    ("STABLE_DIFFUSION_15", (512, 512, 30, 7.5, "EULER_A", "")),
    ("STABLE_DIFFUSION_XL", (1024, 1024, 30, 7.5, "EULER_A", "")),
    ("STABLE_DIFFUSION_3", (1024, 1024, 28, 7.0, None, "")),  # (3 and 35)
    ("STABLE_DIFFUSION_2", (768, 768, 30, 7.5, None, "")),
    ("FLUX_2", (1024, 1024, 30, 4.0, None, "")),
    ("FLUX_", (1024, 1024, 30, 3.5, None, "")),
    ("CHROMA_1", (1024, 1024, 30, 3.5, None, CHROMA_NEGATIVE)),
    ("QWEN", (1024, 1024, 25, 3.5, None, "")),
    ("ANIMA", (1024, 1024, 25, 4.0, None, ANIMA_NEGATIVE)),
    ("KREA_2", (1024, 1024, 28, 3.5, None, "")),
    ("Z_IMAGE", (1024, 1024, 28, 4.0, None, "")),
    ("HUNYUAN_VIDEO", (848, 480, 30, 6.0, None, "")),
    ("SANA", (1024, 1024, 20, 4.5, None, "")),
    ("HI_DREAM", (1024, 1024, 28, 5.0, None, "")),
    ("PIXART", (1024, 1024, 25, 4.5, None, "")),
    ("WUERSTCHEN", (1024, 1024, 25, 4.0, None, "")),
    ("STABLE_CASCADE", (1024, 1024, 25, 4.0, None, "")),
    ("ERNIE", (1024, 1024, 25, 4.0, None, "")),
    ("IDEOGRAM", (1024, 1024, 25, 3.0, None, "")),
]


def onetrainer_sample_defaults(model_type: Any) -> dict[str, Any]:
    """The sample fields OneTrainer fills in for `model_type` (its general ones for a type it has no own for)."""
    defaults = {"width": 512, "height": 512, "diffusion_steps": 30, "cfg_scale": 7.0, "noise_scheduler": "DDIM", "negative_prompt": ""}
    name = str(getattr(model_type, "value", model_type) or "")
    for prefix, (width, height, steps, cfg, scheduler, negative) in _BY_PREFIX:
        if name.startswith(prefix):
            defaults.update(width=width, height=height, diffusion_steps=steps, cfg_scale=cfg, negative_prompt=negative)
            if scheduler:
                defaults["noise_scheduler"] = scheduler
            break
    return defaults


def fill_onetrainer_samples(samples: Any, model_type: Any) -> Any:
    """A OneTrainer config's sample entries with the model type's defaults where they say nothing."""
    if not isinstance(samples, list):
        return samples
    defaults = onetrainer_sample_defaults(model_type or "STABLE_DIFFUSION_15")
    return [{**defaults, **sample} if isinstance(sample, dict) else sample for sample in samples]
