"""Stable Diffusion XL 1.0 base: load, encode, predict, sample, save.

SDXL is SD 1.5's recipe with two text encoders and size conditioning:
- CLIP ViT-L (`text_encoder`, a `CLIPTextModel`) and OpenCLIP ViT-bigG (`text_encoder_2`, a
  `CLIPTextModelWithProjection`). The UNet reads both encoders' second-to-last hidden states side
  by side (768 + 1280 = 2048 wide) and bigG's projected pooled output, as diffusers'
  StableDiffusionXLPipeline and OneTrainer feed it. Clip skip counts from that second-to-last
  layer, separately per encoder (`layer_skips`), in training and in samples alike.
- "Micro-conditioning": each sample's original image size, the top-left corner of the crop taken
  from the resized image and the size it trains at go into the UNet as `time_ids`. The data layer
  fills the first two per sample (`Batch.original_sizes`, `Batch.crop_top_lefts`); the target
  size is the batch's bucket. Sampling uses the image size for both sizes and no crop.

Everything else (noise schedule, attention, latents, the loading paths, errors) is the SD 1.5
code. The inpainting variant takes the mask and the masked image's latents beside the noisy
latents exactly as SD 1.5/2 inpainting does (models/sd_inpainting.py: the same mixin, batches and
latent cache). Full models save as a diffusers folder or an original-layout single file
(models/sdxl_single_file.py); kohya LoRA files use sd-scripts' SDXL names (`lora_te1_`,
`lora_te2_`, `lora_unet_input_blocks_...`, see `lora_module_names`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ot_gradio.config.enums import ModelType, NoiseScheduler
from ot_gradio.models.common import ModelLoadError, base_module, input_dtype, module_device
from ot_gradio.models.family_parts import CheckedLayerSkips
from ot_gradio.models.long_captions import joined, window_ids
from ot_gradio.models.registry import register_family
from ot_gradio.models.schedule_markers import edm_problem, marked_scheduler, markers_for, read_markers, schedule_buffers
from ot_gradio.models.sd15 import (
    StableDiffusion15,
    make_sampling_scheduler,
)
from ot_gradio.models.sd_inpainting import MASK_CHANNELS, InpaintingMixin
from ot_gradio.models.sdxl_single_file import save_sdxl_single_file, unet_module_names

TOKENIZERS = {"text_encoder": "tokenizer", "text_encoder_2": "tokenizer_2"}


@register_family(ModelType.STABLE_DIFFUSION_XL_10_BASE)
class StableDiffusionXL(StableDiffusion15, CheckedLayerSkips):
    tokenizer_folders = tokenizer_attrs = TOKENIZERS
    default_config_repo = "stabilityai/stable-diffusion-xl-base-1.0"
    modelspec_architecture = "stable-diffusion-xl-v1-base"
    lora_base_model_version = "sdxl_base_v1-0"
    single_file_writer = staticmethod(save_sdxl_single_file)  # the original SDXL layout (sdxl_single_file.py)
    # A1111 / OneTrainer SDXL embedding files hold one tensor per encoder
    embedding_keys = {"text_encoder": "clip_l", "text_encoder_2": "clip_g"}
    output_embedding_parts = ("text_encoder", "text_encoder_2")
    _pipeline_load_kwargs: dict = {}
    fp16_unstable = ("vae",)  # as OneTrainer: the SDXL VAE overflows in float16

    def __init__(self, tokenizer, tokenizer_2, text_encoder, text_encoder_2, vae, unet, scheduler, *, force_zeros_for_empty_prompt: bool = True):
        self.tokenizer_2 = tokenizer_2
        self.text_encoder_2 = text_encoder_2
        # SDXL's model_index.json: an empty negative prompt is a zero embedding, not the encoded ""
        self.force_zeros_for_empty_prompt = bool(force_zeros_for_empty_prompt)
        super().__init__(tokenizer, text_encoder, vae, unet, scheduler)

    pipeline_class_name = "StableDiffusionXLPipeline"

    @classmethod
    def _load_pipeline(cls, name: str, **kwargs):
        """SD 1.x/2.x folders load as an SDXL pipeline without the second encoder (it is an
        optional component), so check what came back."""
        pipe = super()._load_pipeline(name, **kwargs)
        missing = [p for p in ("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2") if getattr(pipe, p, None) is None]
        if missing or pipe.unet.config.get("addition_embed_type") != "text_time":
            raise ModelLoadError(
                f"'{name}' is not an SDXL model (it has no {', '.join(missing) or 'size conditioning'}); "
                "pick the model type that matches it, or an SDXL model."
            )
        problem = edm_problem(name, frozenset(), pipe.scheduler)  # a diffusers folder's scheduler (a single file: _load_single_file)
        if problem:
            raise ModelLoadError(problem)
        return cls._checked_unet_channels(name, pipe)

    @classmethod
    def _from_pipeline(cls, pipe):
        return cls(
            pipe.tokenizer,
            pipe.tokenizer_2,
            pipe.text_encoder,
            pipe.text_encoder_2,
            pipe.vae,
            pipe.unet,
            pipe.scheduler,
            force_zeros_for_empty_prompt=pipe.config.get("force_zeros_for_empty_prompt", True),
        )

    @classmethod
    def _load_single_file(cls, path, **kwargs):
        """ComfyUI's `v_pred` / `ztsnr` markers of a v-prediction checkpoint set its schedule."""
        pipe = super()._load_single_file(path, **kwargs)
        markers = read_markers(path)
        problem = edm_problem(str(path), markers, pipe.scheduler)
        if problem:
            raise ModelLoadError(problem)
        pipe.scheduler = marked_scheduler(pipe.scheduler, markers)
        return pipe

    def single_file_extras(self) -> dict:
        """A single file is marked `v_pred` (and `ztsnr`) when the model trained so, as ComfyUI marks it,
        and holds the training schedule's buffers, as OneTrainer's. No `<stem>.yaml`: OneTrainer's
        (sd_xl_base.yaml with `parameterization: v` added) is a keyword sgm's DiffusionEngine does not take."""
        return {"markers": {**schedule_buffers(self.noise_scheduler), **markers_for(self.noise_scheduler.config)}}

    def _check_layer_skip(self, part: str, skip: int) -> None:
        layers = int(base_module(getattr(self, part)).config.num_hidden_layers)
        if not 0 <= skip <= layers - 1:
            raise ValueError(
                f"{part}_layer_skip: {skip} is out of range; this model's {part.replace('_', ' ')} has {layers} "
                f"layers and SDXL already reads the second-to-last, so use 0 to {layers - 1}"
            )

    # ---------------------------------------------------------------- training

    def encode_text(
        self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()
    ) -> dict[str, torch.Tensor]:
        """Both encoders' hidden states side by side (`encoder_hidden_states`) and bigG's pooled,
        projected output (`text_embeds`). `captions` is one list for both encoders or one list per
        encoder part (caption dropout per encoder). Gradients flow through the encoders in `grad`."""
        hidden: list[torch.Tensor] = []
        pooled = None
        windows = self.caption_windows  # a long caption's 75-token windows side by side; pooled: the first's
        for part in self.text_encoder_names:
            texts = list(captions[part] if isinstance(captions, Mapping) else captions)
            tokenizer = getattr(self, TOKENIZERS[part])
            encoder = getattr(self, part)
            ids = window_ids(tokenizer, texts, windows).to(module_device(encoder))
            with torch.set_grad_enabled(part in grad and torch.is_grad_enabled()):
                out = encoder(ids, output_hidden_states=True)
                states = self.output_embedded(part, ids, out.hidden_states[-(2 + self.layer_skips.get(part, 0))])
                hidden.append(joined(states, windows))
                if part == "text_encoder_2":
                    pooled = self._pooled(encoder, out.last_hidden_state[::windows], ids[::windows], tokenizer.eos_token_id)
        device = hidden[0].device
        return {
            "encoder_hidden_states": torch.cat([h.to(device) for h in hidden], dim=-1),
            "text_embeds": pooled.to(device),
        }

    @staticmethod
    def _pooled(encoder, last_hidden: torch.Tensor, ids: torch.Tensor, eos_token_id: int) -> torch.Tensor:
        """bigG's projected output at the first end-of-text token. transformers pools at the
        highest token id for SDXL's legacy config (eos_token_id 2), which is an embedding's token
        once embeddings are added, so the position is found here from the tokenizer's EOS id."""
        positions = (ids == eos_token_id).int().argmax(dim=-1)
        rows = last_hidden[torch.arange(ids.shape[0], device=last_hidden.device), positions.to(last_hidden.device)]
        return encoder.text_projection(rows)

    def time_ids(self, batch, count: int, latent_size: tuple[int, int]) -> torch.Tensor:
        """(count, 6) float: original height and width, crop top and left, target height and
        width. Without per-sample sizes (no batch, or a batch built elsewhere) the image is taken
        as uncropped at the size it trains at."""
        if batch is not None:
            target = tuple(int(v) for v in batch.size)
        else:
            target = tuple(int(v) * self.vae_scale_factor for v in latent_size)
        originals = getattr(batch, "original_sizes", None) or [target] * count
        crops = getattr(batch, "crop_top_lefts", None) or [(0, 0)] * count
        if len(originals) != count or len(crops) != count:
            raise ValueError(f"the batch has {len(originals)} original sizes and {len(crops)} crops for {count} samples")
        return torch.tensor([[*o, *c, *target] for o, c in zip(originals, crops, strict=True)], dtype=torch.float32)

    def predict(self, noisy_latents: torch.Tensor, timesteps: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The UNet's output for `conditioning` (what `encode_text` returned), with the size and
        crop conditioning of `batch` (data.batches.Batch)."""
        device, dtype = module_device(self.unet), input_dtype(self.unet)
        time_ids = self.time_ids(batch, noisy_latents.shape[0], tuple(noisy_latents.shape[-2:]))
        return self.unet(
            noisy_latents.to(device, dtype),
            timesteps.to(device),
            conditioning["encoder_hidden_states"].to(device, dtype),
            added_cond_kwargs={
                "text_embeds": conditioning["text_embeds"].to(device, dtype),
                "time_ids": time_ids.to(device, dtype),
            },
        ).sample

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Module path renames for kohya LoRA files: the UNet's layers under their original
        (sgm) names, as sd-scripts, A1111 and ComfyUI name SDXL LoRA layers. The text encoders
        keep transformers' names."""
        return {"unet": unet_module_names(base_module(self.unet))}

    # ---------------------------------------------------------------- sampling

    def pipeline(self, sampler: NoiseScheduler | str | None = None):
        """A diffusers SDXL pipeline sharing this model's (possibly LoRA-wrapped) components."""
        if sampler is None:
            scheduler = type(self.scheduler).from_config(self.scheduler.config, **self.schedule_overrides)
        else:
            scheduler = make_sampling_scheduler(sampler, self.scheduler.config, self.schedule_overrides)
        pipe = self._pipeline_class()(
            vae=base_module(self.vae),
            text_encoder=base_module(self.text_encoder),
            text_encoder_2=base_module(self.text_encoder_2),
            tokenizer=self.tokenizer,
            tokenizer_2=self.tokenizer_2,
            unet=base_module(self.unet),
            scheduler=scheduler,
            force_zeros_for_empty_prompt=self.force_zeros_for_empty_prompt,
            add_watermarker=False,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def prompt_inputs(self, prompt: str, negative_prompt: str = "") -> dict:
        """Embeddings made by `encode_text` (so each encoder's clip skip applies, which the
        pipeline's single `clip_skip` cannot do); an empty negative prompt is zeros when the model
        says so, as in the pipeline."""
        cond = self.encode_text([prompt])
        if negative_prompt or not self.force_zeros_for_empty_prompt:
            uncond = self.encode_text([negative_prompt or ""])
        else:
            uncond = {k: torch.zeros_like(v) for k, v in cond.items()}
        return {
            "prompt_embeds": cond["encoder_hidden_states"],
            "pooled_prompt_embeds": cond["text_embeds"],
            "negative_prompt_embeds": uncond["encoder_hidden_states"],
            "negative_pooled_prompt_embeds": uncond["text_embeds"],
        }


@register_family(ModelType.STABLE_DIFFUSION_XL_10_BASE_INPAINTING)
class StableDiffusionXLInpainting(InpaintingMixin, StableDiffusionXL):
    """SDXL with the 9-channel inpainting UNet (noisy latents, mask, masked-image latents), as
    diffusers' StableDiffusionXLInpaintPipeline and OneTrainer feed it; the masks and
    masked-image latents reach the batch exactly as for SD 1.5/2 inpainting (sd_inpainting.py)."""

    default_config_repo = "diffusers/stable-diffusion-xl-1.0-inpainting-0.1"
    modelspec_architecture = "stable-diffusion-xl-v1-base/inpainting"
    unet_in_channels = 4 + MASK_CHANNELS + 4

    pipeline_class_name = "StableDiffusionXLInpaintPipeline"

    def pipeline(self, sampler: NoiseScheduler | str | None = None):
        return StableDiffusionXL.pipeline(self, sampler)
