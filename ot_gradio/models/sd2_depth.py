"""Stable Diffusion 2.0 depth (stabilityai/stable-diffusion-2-depth): a UNet with 5 input channels.

Input, as diffusers' StableDiffusionDepth2ImgPipeline and OneTrainer feed it: the noisy latents
(4) and the image's depth map at latent size (1). The depth map is what the pipeline's
`prepare_depth_map` makes: the model's DPT depth estimator run on the image as its feature
extractor prepares it, resized bicubically to the latent size and scaled per image to [-1, 1].
An image's depth map is `<name>-depth.<ext>` beside it where there is one (grey, any bit depth,
white = near: DPT's output), cut and mirrored like the image, then resized and scaled the same way
(`prepare_depth_map` given a `depth_map`); images without one get the estimator's.
With latent caching it is computed once per image variant and cached beside the latents (see
data/batches.py, kind "depth"; the key holds the `-depth` file); without it, each step computes
it from the batch's pixels and depth maps.

The depth estimator and its feature extractor are loaded with the pipeline and saved with a
diffusers folder; they are not trained (not parts): the estimator waits in RAM and runs where the
VAE is only while it computes depth maps. Samples are text-to-image through the depth
pipeline from a blank image (strength 1) with a fixed depth ramp (top far, bottom near), as a
prompt alone gives no depth and a flat map cannot be scaled to [-1, 1].
"""

from __future__ import annotations

import numpy as np
import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import base_module, module_device
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd2 import StableDiffusion2
from ot_gradio.models.weight_variants import local_variant

DEPTH_CHANNELS = 1


@register_family(ModelType.STABLE_DIFFUSION_20_DEPTH)
class StableDiffusion20Depth(StableDiffusion2):
    default_config_repo = "stabilityai/stable-diffusion-2-depth"
    unet_in_channels = 4 + DEPTH_CHANNELS
    pipeline_class_name = "StableDiffusionDepth2ImgPipeline"
    conditioning_kind = "depth"
    modelspec_architecture = "stable-diffusion-v2-depth"  # as OneTrainer's sd_2.0_depth model spec
    _pipeline_load_kwargs: dict = {}

    @classmethod
    def _single_file_pipeline(cls):
        from diffusers import StableDiffusionPipeline

        return StableDiffusionPipeline, StableDiffusion2._pipeline_load_kwargs

    @classmethod
    def _load_single_file(cls, path, *, cache_dir, offline, token, config_dir):
        """A single file holds the UNet, VAE and text encoder; the depth estimator and its feature
        extractor come from where the component configs come from (`config_dir` or the hub repo)."""
        from diffusers import StableDiffusionDepth2ImgPipeline
        from transformers import DPTForDepthEstimation, DPTImageProcessor

        pipe = super()._load_single_file(path, cache_dir=cache_dir, offline=offline, token=token, config_dir=config_dir)
        source = cls._single_file_config(config_dir, cache_dir=cache_dir, offline=offline, model="the same model type")
        where = {"cache_dir": cache_dir, "token": token, "local_files_only": offline or bool(config_dir)}

        def depth_parts():
            return (DPTForDepthEstimation.from_pretrained(source, subfolder="depth_estimator", **where,
                                                          **local_variant(source, "depth_estimator")),
                    DPTImageProcessor.from_pretrained(source, subfolder="feature_extractor", **where))

        estimator, extractor = cls._guarded(str(path), depth_parts, f"The depth estimator comes from '{source}' (its depth_estimator folder).")
        return StableDiffusionDepth2ImgPipeline.from_pipe(pipe, depth_estimator=estimator, feature_extractor=extractor)

    @classmethod
    def _from_pipeline(cls, pipe):
        model = super()._from_pipeline(pipe)
        model.depth_estimator, model.feature_extractor = pipe.depth_estimator, pipe.feature_extractor
        model.depth_estimator.requires_grad_(False).eval()
        return model

    def caches_conditioning(self, masked_training: bool) -> bool:
        return True  # every image has a depth map

    def pipeline(self, sampler=None):
        """The depth pipeline sharing this model's components."""
        from diffusers import StableDiffusionDepth2ImgPipeline

        plain = super().pipeline(sampler)
        pipe = StableDiffusionDepth2ImgPipeline(
            vae=plain.vae, text_encoder=plain.text_encoder, tokenizer=plain.tokenizer, unet=plain.unet, scheduler=plain.scheduler,
            depth_estimator=self.depth_estimator, feature_extractor=self.feature_extractor,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def sampling_inputs(self, height: int, width: int, **inputs) -> dict:
        """Text-to-image: a blank image drawn over entirely (strength 1) with a top-to-bottom depth ramp."""
        super().sampling_inputs(height, width, **inputs)
        rows, cols = height // self.vae_scale_factor, width // self.vae_scale_factor
        ramp = torch.linspace(0.0, 1.0, rows)[:, None].expand(rows, cols)  # DPT's output: larger is nearer
        return {"image": torch.zeros(1, 3, height, width), "strength": 1.0, "depth_map": ramp[None].clone()}

    def save_diffusers(self, directory, dtype):
        """The SD folder plus the depth estimator and feature extractor the depth pipeline loads."""
        from ot_gradio.models.common import save_diffusers_folder

        def write_rest(tmp):
            self.tokenizer.save_pretrained(tmp / self.tokenizer_folders["text_encoder"])
            self.scheduler.save_pretrained(tmp / "scheduler")
            base_module(self.depth_estimator).save_pretrained(tmp / "depth_estimator")
            self.feature_extractor.save_pretrained(tmp / "feature_extractor")
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)

    # ---------------------------------------------------------------- training inputs

    @torch.no_grad()
    def encode_conditioning(self, pixels: torch.Tensor, depth_maps: torch.Tensor | None = None) -> torch.Tensor:
        """Depth maps (B, 1, h, w) in [-1, 1] at latent size for pixels in [-1, 1] (B, 3, H, W),
        as the depth pipeline's `prepare_depth_map` makes them: from `depth_maps` (B, 1, H, W), the
        images' `-depth` maps (data/batches.py), where given (a NaN row: none), else estimated from
        the pixels."""
        size, step = pixels.shape[-2:], self.vae_scale_factor
        given = torch.zeros(len(pixels), dtype=torch.bool) if depth_maps is None else ~depth_maps.flatten(1).isnan().any(1).cpu()
        out = torch.empty(len(pixels), DEPTH_CHANNELS, size[0] // step, size[1] // step, device=module_device(self.vae))
        if given.any():
            out[given.to(out.device)] = self.depth_at_latent_size(depth_maps[given.to(depth_maps.device), 0].to(out.device), size)
        if not given.all():
            out[~given.to(out.device)] = self.depth_at_latent_size(self._estimate_depth(pixels[~given.to(pixels.device)]), size)
        return out

    def depth_at_latent_size(self, depth: torch.Tensor, size) -> torch.Tensor:
        """Depth maps (B, H', W') of any size -> (B, 1, h, w) at the latent size of images of `size`
        (H, W), scaled per image to [-1, 1]: `prepare_depth_map`'s bicubic resize and min-max
        normalisation (a flat map, which it would make NaN, is -1)."""
        height, width = size
        step = self.vae_scale_factor
        depth = torch.nn.functional.interpolate(depth.float().unsqueeze(1), size=(height // step, width // step), mode="bicubic",
                                                align_corners=False)
        low, high = depth.amin(dim=(1, 2, 3), keepdim=True), depth.amax(dim=(1, 2, 3), keepdim=True)
        return 2.0 * (depth - low) / (high - low).clamp_min(torch.finfo(torch.float32).tiny) - 1.0

    def _estimate_depth(self, pixels: torch.Tensor) -> torch.Tensor:
        """The DPT estimator's depth (B, H', W') for pixels in [-1, 1] (B, 3, H, W), fed as the
        feature extractor prepares the images."""
        images = ((pixels.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        values = self.feature_extractor(images=list(np.ascontiguousarray(images)), return_tensors="pt").pixel_values
        estimator, device = self.depth_estimator, module_device(self.vae)
        home = module_device(estimator)
        estimator.to(device)  # it runs where the VAE encodes (the GPU while caching), then goes back
        try:
            return estimator(values.to(device, next(estimator.parameters()).dtype)).predicted_depth.float()
        finally:
            estimator.to(home)

    def conditioning_input(self, noisy_latents: torch.Tensor, batch=None) -> torch.Tensor:
        """The depth maps that go beside the noisy latents: cached (`batch.conditioning_latents`)
        or made from `batch.depth_maps` (the `-depth` files) and, where those have none, `batch.pixels`."""
        depth = getattr(batch, "conditioning_latents", None)
        if depth is None:
            pixels = getattr(batch, "pixels", None)
            if pixels is None:
                raise ValueError("a depth model's step needs the cached depth maps or the pixels; "
                                 "turn latent caching off and on again to rebuild the cache")
            depth = self.encode_conditioning(pixels, getattr(batch, "depth_maps", None))
        n, _, h, w = noisy_latents.shape
        if tuple(depth.shape) != (n, DEPTH_CHANNELS, h, w):
            raise ValueError(f"the depth map has shape {tuple(depth.shape)}; expected {(n, DEPTH_CHANNELS, h, w)}")
        return depth.to(noisy_latents.device, noisy_latents.dtype)

    def predict(self, noisy_latents: torch.Tensor, timesteps: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The UNet's output for the noisy latents with the depth map beside them."""
        depth = self.conditioning_input(noisy_latents, batch)
        return super().predict(torch.cat([noisy_latents, depth], dim=1), timesteps, conditioning, batch)
