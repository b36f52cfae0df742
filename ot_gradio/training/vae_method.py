"""The FINE_TUNE_VAE training method (Stable Diffusion 1.5 / 2.x, as OneTrainer offers it): only
the VAE's decoder trains, to reproduce the training images from their latents. UNet, text
encoder and VAE encoder stay frozen.

A step (`VaeReconstructionStep.loss`), as OneTrainer's StableDiffusionFineTuneVaeSetup: the
batch's image (after crop, flip and the other augmentations) in [-1, 1] is encoded by the frozen
encoder to the mean of its latent distribution (not scaled: the decoder reads it as is), the
decoder turns that back into an image, and the configured loss (MSE / MAE / Huber / log-cosh)
compares it with the image itself; masked training weights the pixels by their mask. The step
needs the pixels, so the dataset gives them instead of cached latents (`needs_pixels`) and the
encoder runs at every step (OneTrainer caches its output with the image; ours costs one frozen
encoder pass per step and keeps the data path as it is).

Saved as FINE_TUNE saves (OneTrainer's FINE_TUNE_VAE uses the fine-tune saver): the whole model,
a single-file checkpoint or a diffusers folder, holding the trained VAE. Backups hold the
decoder's weights. A sample whose prompt is an image file's path is that image encoded and decoded
by the trained VAE (OneTrainer's VAE sampler); other samples run the pipeline, which decodes with
the trained VAE as well.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from PIL import Image

from ..config.doctor import method_problem
from ..config.enums import TrainingMethod
from ..config.parts import learning_rate_or_base
from ..data.images import load_rgb
from ..data.pixels import pixels_tensor
from ..models.common import base_module, module_device, module_dtype
from .distributed import Distributed
from .finetune_method import FineTuneMethod, check_finetune_format
from .loss import diffusion_loss, loss_scale
from .masking import training_mask
from .method_base import register
from .param_groups import ParamGroup

PREFIX = "vae.decoder."


class VaeReconstructionStep:
    """The loss of one batch: the trained decoder's image from the frozen encoder's latents
    against the image. No text is read (`text_variants` gives none to the text cache)."""

    text_cache = None

    def __init__(self, model: Any, config: Any, device: torch.device, precision: Any, dist: Distributed | None = None):
        self.model = model
        self.config = config
        self.device = device
        self.precision = precision
        self.dist = dist or Distributed()
        self.loss_scale = loss_scale(config, self.dist.world)  # `loss_scaler`: OneTrainer scales the VAE's loss too

    def text_variants(self, caption: str) -> list[str]:
        return []

    def rand(self, n: int) -> torch.Tensor:
        return self.dist.mine(torch.rand(n * self.dist.world))

    def loss(self, batch: Any, trained_text_parts: frozenset[str] | set[str] = frozenset()) -> torch.Tensor:
        c = self.config
        if batch.pixels is None:
            raise ValueError("FINE_TUNE_VAE needs the batch's images; the dataset gave cached latents")
        vae = self.model.vae
        image = batch.pixels.to(self.device, torch.float32)
        with torch.no_grad():
            latents = vae.encode(image.to(module_dtype(vae))).latent_dist.mean
        with self.precision.autocast():
            predicted = vae.decode(latents).sample
        mask = None
        if c.masked_training:
            mask = training_mask(batch.mask, image.shape[-2:], unmasked_probability=c.unmasked_probability,
                                 device=self.device, rand=self.rand)
        return self.loss_scale * diffusion_loss(
            predicted, image,
            mse_strength=c.mse_strength, mae_strength=c.mae_strength, huber_strength=c.huber_strength,
            huber_delta=c.huber_delta, log_cosh_strength=c.log_cosh_strength,
            sample_weights=batch.loss_weights, mask=mask, unmasked_weight=c.unmasked_weight,
            normalize_masked_area_loss=c.normalize_masked_area_loss,
        )


@torch.no_grad()
def reconstruct(vae: Any, path: Path, width: int, height: int) -> Image.Image:
    """The image at `path`, scaled to cover width x height and centre-cropped, through `vae`."""
    try:
        img = load_rgb(path)
    except Exception as exc:
        raise ValueError(f"samples: the prompt {path} is an image file that cannot be read ({exc}); fix or replace it") from exc
    with img:
        scale = max(width / img.width, height / img.height)
        size = (max(width, round(img.width * scale)), max(height, round(img.height * scale)))
        scaled = img.resize(size, Image.Resampling.LANCZOS)
    left, top = (scaled.width - width) // 2, (scaled.height - height) // 2
    pixels = pixels_tensor(scaled.crop((left, top, left + width, top + height)))[None]
    latents = vae.encode(pixels.to(module_device(vae), module_dtype(vae))).latent_dist.mean
    out = vae.decode(latents).sample[0].float().clamp(-1, 1).add(1).mul(127.5).round().byte()
    return Image.fromarray(out.permute(1, 2, 0).cpu().numpy())


@register(TrainingMethod.FINE_TUNE_VAE)
class FineTuneVaeMethod(FineTuneMethod):
    needs_pixels = True
    step_parts = ("vae",)  # UNet and text encoder wait in RAM, as OneTrainer keeps only the VAE on the device

    def setup(self, model: Any, config: Any, device: torch.device) -> list[ParamGroup]:
        problem = method_problem(config.model_type, TrainingMethod.FINE_TUNE_VAE)  # the start checks' line
        if problem:
            raise ValueError(problem)
        check_finetune_format(config.output_model_format, model)
        for module in model.parts.values():
            module.requires_grad_(False)
        decoder = base_module(model.vae).decoder
        decoder.requires_grad_(True)
        self.trained_parts = ["vae"]
        self.embeddings = None
        lr = learning_rate_or_base(config.vae.learning_rate, config.learning_rate)
        return [ParamGroup(name="vae", params=list(decoder.parameters()), lr=lr)]

    def training_step(self, model: Any, config: Any, device: torch.device, precision: Any,
                      noise_fn: Any = None, dist: Distributed | None = None) -> VaeReconstructionStep:
        return VaeReconstructionStep(model, config, device, precision, dist)

    def sample_image(self, model: Any, sample: Any, text: Any, seed: int, device: torch.device) -> Any:
        """As OneTrainer's VAE sampler: a prompt that is an image file's path gives that image
        encoded and decoded by the trained VAE (scaled to cover the sample's size, centre-cropped);
        any other prompt the pipeline's image, which the trained VAE decodes too."""
        path = Path(sample.prompt.strip()).expanduser()
        if not sample.prompt.strip() or not path.is_file():
            return super().sample_image(model, sample, text, seed, device)
        return reconstruct(model.vae, path, sample.width, sample.height)

    def trainable_state(self, model: Any) -> dict[str, torch.Tensor]:
        decoder = base_module(model.vae).decoder
        return {PREFIX + k: v.detach() for k, v in decoder.state_dict().items()}

    def load_trainable_state(self, model: Any, state: dict[str, torch.Tensor]) -> None:
        decoder = base_module(model.vae).decoder
        sub = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
        missing, unexpected = decoder.load_state_dict(sub, strict=False)
        if missing or unexpected or len(sub) != len(state):
            raise ValueError(
                f"continue_last_backup: the backup's weights are not this VAE decoder's ({len(missing)} missing, "
                f"{len(unexpected) + len(state) - len(sub)} unexpected); start without the backup"
            )

