"""The diffusion math of a training step, kept out of the loop: how the model is set up for the
run's options, and how a batch becomes a loss.

Model options (applied once, before the training method adds its weights):
- `force_v_prediction` / `force_epsilon_prediction` change the prediction type of the noise
  scheduler for training and of every sampler; `rescale_noise_scheduler_to_zero_terminal_snr`
  rescales the betas to zero terminal SNR for both (see the family's `configure_noise_schedule`)
  and switches to v-prediction, as OneTrainer does, unless epsilon prediction is forced.
- `attention_mechanism` picks the UNet's attention implementation (`set_attention`).
- A part's `weight_dtype` of FLOAT_8, INT_8, NFLOAT_4, INT_W8A8 or FLOAT_W8A8 quantizes its Linear layers
  (quantize.py); in the denoiser only those `quantization.layer_filter` names (all when blank). A W8A8
  type the device cannot multiply in 8 bits is said once, in the warnings.
- `text_encoder_sequence_length` is how many tokens a T5 text encoder reads (PixArt).
- `force_circular_padding` pads every convolution of the family's `circular_padding` parts
  circularly (SD 1.x/2.x and SDXL: UNet and VAE; Würstchen and Cascade: prior, decoder and its VQGAN),
  for training and sampling, so samples tile seamlessly; a LoRA's down convolution pads as its base
  layer (lora.py). The doctor refuses it for the other families.

A step (`DiffusionStep.loss`): latents (cached, or encoded now) -> timesteps from the timestep
distribution of the family's schedule (schedules.py: DDPM, or flow matching) -> noise with offset / generalized offset / input perturbation (noise.py) -> the
prediction under autocast -> the loss of loss.py with the latent mask of masked training
(masking.py; with `masked_prior_preservation_weight`, also pulled outside the mask towards the
prediction of the method's base model, the LoRA turned off), the concepts' loss weights and the timestep loss weight.
The samples of PRIOR_PREDICTION concepts take that base model's prediction as their target (as
OneTrainer: it predicts the whole batch, with the same noise, timesteps and conditioning, without
gradient, and the loss is computed as for any other sample). A model with an
`image_to_video_share` (Wan 2.2 TI2V 5B, LTX-2) starts that share of its clips from their clean first
frame, left out of their loss (first_frame.py). A model that learns its
variance (PixArt) adds `vb_loss_strength` x the variational bound (vb_loss.py); the whole times the
`loss_scaler`'s batch / accumulation factor (`loss_scale`), as OneTrainer scales it. Captions are replaced
by an empty one with `caption_dropout_probability` (per sample, every text encoder's at once, as
kohya, ai-toolkit and diffusion-pipe drop captions), then with the text encoder's `dropout_probability`
(with several text encoders, per encoder with each one's own probability, as OneTrainer drops them), so the model also
learns the unconditioned image that classifier-free guidance starts from. (OneTrainer zeroes the
text encoder's output instead; an empty caption is what sampling uses as the unconditioned
prompt.) With `debug_mode`, the step hands its latents, mask and captions to the trainer's
debug writer (debug_output.py) before the prediction.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from ..config.enums import DataType
from ..config.families import family_info
from ..config.flow_options import flow_matching_conflicts
from ..config.svd_quant import svd_problems
from ..models.attention import keep_cudnn_attention_off
from ..models.long_captions import windows_for
from .device import QUANTIZED_TYPES, Precision, quantized_part_trained
from .distributed import Distributed
from .first_frame import draw_given, with_first_frame, without_first_frame
from .fp16_fallback import install_fp16_fallback, load_dtype
from .loss import diffusion_loss, loss_scale
from .masking import training_mask
from .noise import adaptive_offset
from .quantize import (
    GGUF_A8_CODES,
    W8A8_CODES,
    gguf_a8_layers,
    quantization_filter,
    quantize_linear_layers,
    rest_in,
    w8a8_kernel_problem,
)
from .schedules import make_schedule, schedule_kind
from .svd_quant import svd_spec
from .vb_loss import VariationalBound


def model_parts(model: Any) -> list[str]:
    """The config part sections this model has (unet, text_encoder, text_encoder_2, vae, prior, ...)."""
    return list(model.parts)


def prediction_override(config: Any) -> str | None:
    """The prediction type the options set (None: the model's own). Zero terminal SNR switches to
    v-prediction, as OneTrainer's setups do (epsilon cannot learn its last timestep, pure noise),
    unless force_epsilon_prediction is on (kohya's zero_terminal_snr without v_parameterization)."""
    if config.force_v_prediction and config.force_epsilon_prediction:
        raise ValueError("force_v_prediction and force_epsilon_prediction are both on; turn one of them off")
    if config.force_v_prediction:
        return "v_prediction"
    if config.force_epsilon_prediction:
        return "epsilon"
    if config.rescale_noise_scheduler_to_zero_terminal_snr:
        return "v_prediction"
    return None


def configure_model(model: Any, config: Any, device: torch.device, precision: Precision) -> list[str]:
    """Apply the model options of the config; returns warnings for the user."""
    warnings = []
    if problems := svd_problems(config):  # (the page refuses them before Start too)
        raise ValueError("; ".join(problems))
    if schedule_kind(model) == "flow_matching":
        problems = flow_matching_conflicts(config)
        if problems:
            raise ValueError("; ".join(problems))
        model.configure_flow(config)
    else:
        model.configure_noise_schedule(
            prediction_type=prediction_override(config),
            zero_terminal_snr=config.rescale_noise_scheduler_to_zero_terminal_snr,
        )
    if config.rescale_noise_scheduler_to_zero_terminal_snr and model.prediction_type == "epsilon":
        warnings.append(
            "rescale_noise_scheduler_to_zero_terminal_snr with force_epsilon_prediction: with epsilon prediction the model "
            "cannot learn anything at the last timestep (pure noise); turn force_epsilon_prediction off to train "
            "v-prediction, as zero terminal SNR does by itself (and in OneTrainer)"
        )
    model.set_attention(config.attention_mechanism, device)
    keep_cudnn_attention_off(device)
    model.layer_skips = {
        part: getattr(config, f"{part}_layer_skip", 0) or 0 for part in model.text_encoder_names
    }
    model.text_encoder_sequence_length = config.text_encoder_sequence_length  # read by the T5 / LLM families
    if hasattr(model, "caption_windows"):  # SD 1.x/2.x and SDXL: captions past 75 tokens (models/long_captions.py)
        model.caption_windows = windows_for(config.text_encoder_max_token_length)
    model.mask_padding_tokens = bool(config.transformer.attention_mask)  # read by Flux.1, SD 3, HiDream (the doctor refuses it elsewhere)
    for part in model_parts(model):
        data_type = DataType(getattr(config, part).weight_dtype)
        if data_type in QUANTIZED_TYPES:
            # the layer filter names the denoiser's layers (OneTrainer's presets: "transformer_block", "layers")
            include = quantization_filter(config) if part == model.denoiser else None
            compute = load_dtype(part, model, precision.dtype, config.fallback_train_dtype) or torch.float32
            quantize_linear_layers(getattr(model, part), data_type, device, compute, part, include=include, svd=svd_spec(config))
            problem = w8a8_kernel_problem(data_type, device) if data_type in W8A8_CODES else None
            if problem is not None and problem not in warnings:
                warnings.append(problem)
        elif data_type in GGUF_A8_CODES and device.type != "meta":  # the .gguf file's GGUF layers: their matmuls in 8 bits
            count, problem = gguf_a8_layers(getattr(model, part), data_type, device)
            if not count:
                problem = (f"{part}.weight_dtype: {data_type.value} runs the quantized layers of the .gguf file in 8 bits, and "
                           f"{part}.model_name holds none (F32 / F16 / BF16 weights only): it trains as GGUF")
            if problem is not None:
                warnings.append(problem)
    warnings += quantize_waiting_modules(model, config, device, precision)
    install_fp16_fallback(model, config.fallback_train_dtype)  # T5 / LLMs at the fallback type in a float16 run
    if config.force_circular_padding:
        info = family_info(config.model_type)
        if info is None or not info.circular_padding:
            raise ValueError(f"force_circular_padding: not done for {config.model_type.value}; turn it off")
        for part in info.circular_padding:
            circular_padding(getattr(model, part))
    return warnings


def circular_padding(module: torch.nn.Module) -> None:
    """Every Conv2d of `module` wraps around its edges instead of padding with zeros (OneTrainer's
    force_circular_padding): what leaves one side comes in at the other, so an image tiles."""
    for layer in module.modules():
        if isinstance(layer, torch.nn.Conv2d):
            layer.padding_mode = "circular"


def quantize_waiting_modules(model: Any, config: Any, device: torch.device, precision: Precision) -> list[str]:
    """The frozen modules beside the parts that have a config section of their own (Ideogram 4's
    `unconditional_transformer`, the description's extra_params) in their section's weight type:
    quantized where they wait (RAM), they take turns on the device for samples (bitsandbytes'
    layers move with their quantized weights: models/sampling_parts.move_module); one left out
    (include off: the model holds None) has nothing to quantize. Returns the warnings."""
    info = family_info(config.model_type)
    names = [n for n in (info.extra_params if info is not None else {})
             if n in type(config).model_fields and getattr(model, n, None) is not None]
    warnings = []
    for name in names:
        module, data_type = getattr(model, name), DataType(getattr(config, name).weight_dtype)
        if data_type not in QUANTIZED_TYPES:
            continue
        home, compute = next(module.parameters()).device, precision.dtype or torch.float32
        quantize_linear_layers(module, data_type, home, compute, name, svd=svd_spec(config))
        rest_in(module, compute)
        problem = w8a8_kernel_problem(data_type, device) if data_type in W8A8_CODES else None
        if problem is not None and problem not in warnings:
            warnings.append(problem)
    return warnings


def check_quantized_parts_frozen(model: Any, config: Any) -> None:
    """Quantized weights cannot be trained; only adapters on top of them."""
    stored = (torch.float8_e4m3fn, torch.int8, torch.uint8)
    for part in model_parts(model):
        if DataType(getattr(config, part).weight_dtype) not in QUANTIZED_TYPES:
            continue
        if any(p.requires_grad and p.dtype in stored for p in getattr(model, part).parameters()):
            raise ValueError(quantized_part_trained(part, getattr(config, part).weight_dtype))


class DiffusionStep:
    def __init__(
        self, model: Any, config: Any, device: torch.device, precision: Precision, noise_fn: Callable | None = None,
        caption_transform: Callable[[str], str] | None = None, dist: Distributed | None = None,
        prior_model: Callable[[], AbstractContextManager] | None = None,
    ):
        self.model = model
        # the method's base model (LoRA: turned off), for masked prior preservation and PRIOR_PREDICTION concepts
        self.prior_model = prior_model
        self.preserve = config.masked_training and config.masked_prior_preservation_weight > 0
        # multi-GPU: per-sample draws are made for the global batch, this process keeps its rows
        self.dist = dist or Distributed()
        # the method's text hook (embeddings: placeholders -> their tokens), before caption dropout
        self.caption_transform = caption_transform
        self.config = config
        self.device = device
        self.precision = precision
        self.noise_fn = noise_fn  # tests pass fixed (noise, timesteps) here
        # the share of clips that start from their first frame (first_frame.py); None: the model's. The memory probe's 1: its worst case
        self.first_frame_share: float | None = None
        self.loss_scale = loss_scale(config, self.dist.world)
        # the trainer sets a TextEmbeddingCache (data/text_cache.py) when no text encoder trains
        self.text_cache = None
        self._adapted_text: bool | None = None  # prior_prediction: a text encoder has LoRA layers
        self.debug: Callable[..., None] | None = None  # the trainer sets debug_output.DebugWriter with debug_mode on
        # the family's objective: DDPM (epsilon / v) or flow matching (schedules.py)
        self.schedule = make_schedule(model, config, device)
        # models that learn their variance (PixArt) train it with the variational bound
        self.vb = None
        if model.learns_variance and config.vb_loss_strength > 0:
            self.vb = VariationalBound(model.noise_scheduler.betas)

    def captions(self, captions: list[str], part: str = "text_encoder") -> list[str]:
        p = getattr(self.config, part).dropout_probability
        if p <= 0:
            return list(captions)
        drop = (self.rand(len(captions)) < p).tolist()
        return ["" if d else c for c, d in zip(captions, drop, strict=True)]

    def rand(self, n: int) -> torch.Tensor:
        """n uniform numbers for this process's n samples, drawn as part of the global batch's."""
        return self.dist.mine(torch.rand(n * self.dist.world))

    def text_inputs(self, captions: list[str]) -> list[str] | dict[str, list[str]]:
        """The captions for `encode_text`: one list, or one per text encoder part when the model
        has several (each dropped with its own probability, after the whole caption's dropout)."""
        if self.caption_transform is not None:
            captions = [self.caption_transform(c) for c in captions]
        whole = float(getattr(self.config, "caption_dropout_probability", 0.0) or 0.0)
        if whole > 0:  # every text encoder's caption at once
            drop = (self.rand(len(captions)) < whole).tolist()
            captions = ["" if d else c for c, d in zip(captions, drop, strict=True)]
        parts = self.model.text_encoder_names
        if len(parts) <= 1:  # (none: every text encoder left out, include: false)
            return self.captions(captions, parts[0]) if parts else captions
        return {part: self.captions(captions, part) for part in parts}

    def text_variants(self, caption: str) -> list[str | dict[str, str]]:
        """Every text one sample with `caption` can give `encode_text` (the method's hook applied;
        with caption dropout also the empty caption, per text encoder part), in the form the
        text cache keys a sample: a string, or {part: text} with several parts."""
        if self.caption_transform is not None:
            caption = self.caption_transform(caption)
        parts = self.model.text_encoder_names
        whole = bool(caption) and float(getattr(self.config, "caption_dropout_probability", 0.0) or 0.0) > 0
        options = [[caption, ""] if getattr(self.config, part).dropout_probability > 0 and caption else [caption] for part in parts]
        if len(parts) <= 1:
            return [caption, ""] if whole else list(options[0]) if parts else [caption]
        variants = [dict(zip(parts, choice, strict=True)) for choice in itertools.product(*options)]
        if whole and (empty := dict.fromkeys(parts, "")) not in variants:  # every encoder's caption dropped at once
            variants.append(empty)
        return variants

    def noise(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(timesteps, noise in the input, noise of the target)."""
        if self.noise_fn is not None:
            noise, timesteps = self.noise_fn(latents)
            noise = noise.to(latents.device, latents.dtype)
            return self.schedule.from_fixed(timesteps), noise, noise
        shape = (latents.shape[0] * self.dist.world, *latents.shape[1:])
        timesteps = self.schedule.draw_timesteps(latents, shape[0])
        # adaptive_noise_scale: this process's images' offset strengths, in its rows of the global batch's draw
        add = adaptive_offset(latents, self.config.adaptive_noise_scale) if self.config.offset_noise_weight > 0 else None
        # only the shape, type and device of the first argument are used
        noisy, clean = self.schedule.make_noise(latents.new_empty(shape), timesteps, offset_add=None if add is None else self.dist.spread(add))
        mine = self.dist.mine
        return mine(timesteps), mine(noisy), mine(clean)

    def loss(self, batch: Any, trained_text_parts: frozenset[str] | set[str] = frozenset()) -> torch.Tensor:
        c = self.config
        model = self.model
        if batch.latents is not None:
            latents = batch.latents.to(self.device, torch.float32)
        else:
            with torch.no_grad():
                latents = model.encode_images(batch.pixels.to(self.device)).float()
        timesteps, input_noise, target_noise = self.noise(latents)
        noisy = self.schedule.noisy(latents, input_noise, timesteps)
        # image-to-video steps of a text-to-video model (first_frame.py): these clips start from their clean first frame
        share = model.image_to_video_share if self.first_frame_share is None else self.first_frame_share
        batch.given_first_frame = given = draw_given(latents, share, self.rand)
        if given is not None:
            noisy = with_first_frame(noisy, model.given_first_frame(batch, latents), given)
        mask = None
        if c.masked_training:
            mask = training_mask(batch.mask, latents.shape[-2:], unmasked_probability=c.unmasked_probability,
                                 device=self.device, rand=self.rand)
            if mask is not None and latents.ndim == 5:  # video latents [B, C, F, h, w]: one mask for every frame
                mask = mask.unsqueeze(2)
        if model.inpainting:
            batch.latent_mask = mask  # an inpainting model takes the mask the loss uses as input
        texts = self.text_inputs(batch.captions)
        if self.debug is not None:  # debug_mode: what this step trains on, as files (debug_output.py)
            self.debug(batch, latents, mask, texts)
        with self.precision.autocast():
            if self.text_cache is not None:
                conditioning = self.text_cache.encode(texts, model.encode_text, self.device)
            else:
                conditioning = self.encode_text(texts, batch, trained_text_parts)
            prior = None
            rows = getattr(batch, "prior_prediction", None)  # PRIOR_PREDICTION samples (a Batch's field)
            rows = rows if rows is not None and rows.any() else None
            if self.prior_model is not None and ((self.preserve and mask is not None) or rows is not None):
                prior = self.prior_prediction(noisy, timesteps, texts, conditioning, batch)
            if self.vb is None:
                pred = model.predict(noisy, timesteps, conditioning, batch)
            else:
                pred, variance = model.predict(noisy, timesteps, conditioning, batch, variance=True)
        target = self.schedule.target(latents, target_noise, timesteps)
        if rows is not None:  # PRIOR_PREDICTION samples: the base model's prediction is the target
            target = prior_targets(target, prior, rows)
        sample_weights = batch.loss_weights
        if given is not None:  # their first frame was given, not predicted: out of the loss
            target, sample_weights = without_first_frame(pred, target, given, sample_weights)
            prior = None if prior is None else with_first_frame(prior, pred[:, :, :1].detach(), given)
        extra = None if self.vb is None else c.vb_loss_strength * self.vb(latents, noisy, timesteps, pred, variance)
        weights = self.schedule.loss_weights(timesteps)
        return self.loss_scale * diffusion_loss(
            pred,
            target,
            mse_strength=c.mse_strength,
            mae_strength=c.mae_strength,
            huber_strength=c.huber_strength,
            huber_delta=c.huber_delta,
            log_cosh_strength=c.log_cosh_strength,
            sample_weights=sample_weights,
            mask=mask,
            unmasked_weight=c.unmasked_weight,
            normalize_masked_area_loss=c.normalize_masked_area_loss,
            timestep_weights=weights,
            extra_loss=extra,
            prior=prior if self.preserve else None,
            prior_weight=c.masked_prior_preservation_weight,
        )

    def encode_text(self, texts: Any, batch: Any, grad: frozenset[str] | set[str]) -> Any:
        control = {"control": batch.control_pixels} if self.model.control_image else {}  # read with the prompt (Qwen-Image-Edit)
        return self.model.encode_text(texts, grad=grad, **control)

    @torch.no_grad()
    def prior_prediction(self, noisy: torch.Tensor, timesteps: torch.Tensor, texts: Any, conditioning: Any, batch: Any) -> torch.Tensor:
        """The base model's prediction for the same inputs (masked prior preservation), without
        gradient; a text encoder with a LoRA, training or stopped (its outputs then cached or not),
        encodes the captions again without it, as OneTrainer's prior model does."""
        with self.prior_model():
            if self._text_encoder_adapted():
                conditioning = self.encode_text(texts, batch, frozenset())
            return self.model.predict(noisy, timesteps, conditioning, batch).detach()

    def _text_encoder_adapted(self) -> bool:
        """A text encoder of the model carries LoRA layers (asked once: they stay for the run)."""
        if self._adapted_text is None:
            from .lora import has_lora  # noqa: PLC0415

            parts = self.model.parts
            self._adapted_text = any(has_lora(parts[p]) for p in self.model.text_encoder_names if p in parts)
        return self._adapted_text


def prior_targets(target: torch.Tensor, prior: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
    """`target` with the rows of PRIOR_PREDICTION samples replaced by the base model's prediction."""
    if prior is None:
        raise ValueError("concepts[].type: a PRIOR_PREDICTION concept needs the method's base model (a LoRA turned off); "
                         "train a LORA, or set the concept's type to STANDARD")
    keep = rows.to(target.device).view(-1, *([1] * (target.dim() - 1)))
    return torch.where(keep, prior.to(target.dtype), target)
