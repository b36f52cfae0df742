"""PixArt-α: load, encode, predict, sample, save.

What differs from Stable Diffusion (OneTrainer's PixArtAlphaModel / BasePixArtAlphaSetup):
- The text encoder is T5 v1.1 XXL. Captions are padded to `text_encoder_sequence_length` tokens
  (120 when unset, as OneTrainer and diffusers' pipeline use) and the attention mask goes to T5
  and, as `encoder_attention_mask`, to the transformer's cross-attention, so padding never
  changes the prediction. "Clip skip" takes an earlier T5 layer with T5's final norm applied.
- The denoiser is a DiT (`PixArtTransformer2DModel`, patch 2) that learns its variance: of its
  8 output channels the first 4 are epsilon, the other 4 choose the reverse step's variance.
  OneTrainer trains those with the variational bound (`vb_loss_strength`), so does the trainer
  here (training/vb_loss.py, fed by `predict(..., variance=True)`); sampling ignores them.
- The 1024 model is micro-conditioned on the image's size and aspect ratio
  (`use_additional_conditions`, which diffusers turns on for sample_size 128): `predict` passes
  the batch's target size, as OneTrainer and the pipeline do. The 512 model ignores them.
- SD's VAE; DDPM training with linear betas 1e-4..0.02 and epsilon; the shipped sampler is
  DPM-Solver++.
- Loading: a hub id, a diffusers folder or `tiny:pixart`. PixArt's own checkpoints (`.pth` with
  the original key layout, transformer only) are not loaded, as OneTrainer does not either.
  Saving: a diffusers folder, or, as OneTrainer's SAFETENSORS, the transformer alone in the
  original layout (models/pixart_single_file.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType, NoiseScheduler
from ot_gradio.models.attention import set_classic_attention
from ot_gradio.models.common import (
    HUB_ID,
    ModelLoadError,
    base_module,
    cast_parts,
    input_dtype,
    module_device,
    module_dtype,
    part_dtypes,
    plain_state_dict,
    save_diffusers_folder,
    torch_dtype,
)
from ot_gradio.models.family import Family
from ot_gradio.models.family_parts import DdpmNoise, HubLoading, KlVaeLatents, sentencepiece_files_readable
from ot_gradio.models.registry import register_family
from ot_gradio.models.sampling_parts import exact_size, generation_size, parked_for_sampling
from ot_gradio.models.sd15 import make_sampling_scheduler
from ot_gradio.models.vae_override import apply_vae_override
from ot_gradio.models.weight_variants import hub_variant

DEFAULT_SEQUENCE_LENGTH = 120


@register_family(ModelType.PIXART_ALPHA)
class PixArtAlpha(Family, HubLoading, KlVaeLatents, DdpmNoise):
    """The family interface (models/base.py) for PixArt-α 512 and 1024-MS."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    pipeline_class_name = "PixArtAlphaPipeline"
    architecture = "pixart-alpha"  # modelspec.architecture of the transformer file
    # tokens T5 reads when `text_encoder_sequence_length` is unset (the pipeline's default)
    default_sequence_length = DEFAULT_SEQUENCE_LENGTH
    # the key of T5's vectors in embedding files and LoRA bundles, as OneTrainer writes them
    embedding_keys = {"text_encoder": "t5"}
    output_embedding_parts = ("text_encoder",)
    # aspect buckets in multiples of 16 px (VAE 8 x patch 2), OneTrainer's quantization for PixArt
    # OneTrainer's BasePixArtAlphaSetup.LAYER_PRESETS for the transformer; T5's own names for
    # the text encoder (every T5 projection is a Linear: q, k, v, o, wi_0, wi_1, wo)
    lora_layer_presets = {
        "transformer": {"full": [], "attn-mlp": ["attn1", "attn2", "ff.net"], "attn-only": ["attn1", "attn2"], "blocks": ["transformer_block"]},
        "text_encoder": {"full": [], "attn-mlp": ["SelfAttention", "DenseReluDense"], "attn-only": ["SelfAttention"]},
    }

    def __init__(self, tokenizer, text_encoder, vae, transformer, scheduler):
        self.tokenizer, self.text_encoder, self.vae, self.transformer = tokenizer, text_encoder, vae, transformer
        self._use_scheduler(scheduler)
        self.layer_skips: dict[str, int] = {}
        # tokens T5 reads, for training and sampling; None = default_sequence_length
        self.text_encoder_sequence_length: int | None = None

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None,
             part_models: Mapping[str, str] | None = None) -> PixArtAlpha:
        """Load from a hub id (PixArt-alpha/PixArt-XL-2-1024-MS, ...-512x512), a local diffusers
        folder or `tiny:pixart`. Each part loads straight in its dtype (`dtypes` keys:
        transformer, text_encoder, vae; float32 when not named), so T5 XXL never sits in memory
        in float32 when it is not asked to. `config_dir` is for single files, which PixArt has not;
        every part comes from `name`: a transformer file of its own (`part_models`) is refused,
        as OneTrainer reads none for PixArt."""
        if str(dict(part_models or {}).get("transformer") or "").strip():
            raise ModelLoadError(f"transformer.model_name: {cls.model_type.value} loads its transformer from the base model only; "
                                 "leave it blank.")
        per_part = part_dtypes(dtypes, cls.part_names) | {"default": torch.float32}
        with sentencepiece_files_readable():
            pipe = cls._load_pipeline(str(name or "").strip(), cache_dir=cache_dir, offline=offline, token=token, dtype=per_part)
        model = cls(pipe.tokenizer, pipe.text_encoder, pipe.vae, pipe.transformer, pipe.scheduler)
        apply_vae_override(model, part_models, cache_dir=cache_dir, offline=offline, token=token)
        cast_parts(model.parts, per_part)
        return model

    @classmethod
    def _load_pipeline(cls, name: str, *, cache_dir, offline, token, dtype):
        pipeline_class = cls._pipeline_class()  # PixArtSigmaPipeline for Σ
        label, example = cls.family_name, cls.default_config_repo

        if not name:
            raise ModelLoadError(f"No base model given. Enter a Hugging Face id or a diffusers folder of {label}.")
        pipe = cls._tiny_or_folder(name, lambda folder, kw: pipeline_class.from_pretrained(folder, local_files_only=True, dtype=dtype, **kw),
                                   label, "transformer, text_encoder, tokenizer, vae, scheduler")
        if pipe is not None:
            return pipe
        path = Path(name).expanduser()
        if path.is_file():
            raise ModelLoadError(
                f"'{name}' is a single file; {label} loads from a diffusers folder or a Hugging Face id (like "
                f"'{example}'), as in OneTrainer. PixArt's own .pth checkpoints hold only the transformer in another "
                "layout: convert them with diffusers' scripts/convert_pixart_alpha_to_diffusers.py (or _sigma_)."
            )
        looks_local = name.startswith(("/", ".", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", name) is not None or name.count("/") > 1
        if looks_local or not HUB_ID.fullmatch(name):
            raise ModelLoadError(
                f"Base model '{name}' was not found: no such folder. Check the path, or give a Hugging Face id "
                f"like '{example}'."
            )
        hint = (
            "No local folder has that name and, offline, it is not in the local Hugging Face cache"
            + (f" ({cache_dir})" if cache_dir else "")
            + "; turn offline mode off to download it once, or pick a local diffusers folder."
            if offline
            else "Check the id, your network and, for gated or private models, the access token."
        )
        return cls._guarded(
            name,
            lambda: pipeline_class.from_pretrained(
                name, cache_dir=cache_dir, token=token, local_files_only=offline, dtype=dtype,
                **hub_variant(name, cache_dir=cache_dir, token=token, offline=offline),
            ),
            hint,
        )

    # ---------------------------------------------------------------- parts

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Kohya renames: the transformer as `transformer.<path>` (ComfyUI's PixArt map: q/k/v are
        rows of fused weights, so no `lora_unet_` name) and T5 as `lora_te1_` (models/comfy_lora_names.py)."""
        from ot_gradio.models.key_layout import layer_paths
        from ot_gradio.models.lora_module_names import comfy_lora_module_names

        return comfy_lora_module_names("pixart", {p: layer_paths(base_module(getattr(self, p))) for p in ("transformer", "text_encoder")})

    @property
    def learns_variance(self) -> bool:
        """Whether the variance channels train with the variational bound: only for epsilon
        prediction (the bound is written for it) and not with zero terminal SNR (the bound is
        infinite at the last timestep)."""
        config = base_module(self.transformer).config
        return (
            config.out_channels == 2 * config.in_channels
            and self.prediction_type == "epsilon"
            and not self.schedule_overrides.get("rescale_betas_zero_snr")
        )

    def set_attention(self, mechanism: str, device: torch.device | str | None = None) -> None:
        """The transformer's attention (models/attention.py)."""
        set_classic_attention(self.transformer, mechanism, device)

    # ---------------------------------------------------------------- training

    @property
    def sequence_length(self) -> int:
        return int(self.text_encoder_sequence_length or self.default_sequence_length)

    def tokenize(self, prompts: str | Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids, attention mask), padded and truncated to `sequence_length`."""
        if isinstance(prompts, str):
            prompts = [prompts]
        out = self.tokenizer(
            list(prompts),
            padding="max_length",
            max_length=self.sequence_length,
            truncation=True,
            add_special_tokens=True,
            return_tensors="pt",
        )
        return out.input_ids, out.attention_mask

    def encode_prompt(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, layer_skip: int = 0) -> torch.Tensor:
        """T5 hidden states (B, tokens, width); `layer_skip` > 0 takes an earlier layer's output
        with T5's final layer norm applied (OneTrainer's encode_t5)."""
        device = module_device(self.text_encoder)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        if layer_skip <= 0:  # (a float16 run: T5 at the fallback train type, `fp16_unstable`)
            hidden = self.text_encoder(input_ids, attention_mask=attention_mask)[0]
        else:
            out = self.text_encoder(input_ids, attention_mask=attention_mask, output_hidden_states=True)
            hidden = base_module(self.text_encoder).encoder.final_layer_norm(out.hidden_states[-(layer_skip + 1)])
        return self.output_embedded("text_encoder", input_ids, hidden)

    def encode_text(self, captions: Sequence[str], grad: frozenset[str] | set[str] = frozenset()) -> dict[str, torch.Tensor]:
        """{"encoder_hidden_states", "encoder_attention_mask"} for a batch of captions; gradients
        flow through T5 only when "text_encoder" is in `grad`."""
        ids, mask = self.tokenize(list(captions))
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            hidden = self.encode_prompt(ids, mask, self.layer_skips.get("text_encoder", 0))
        return {"encoder_hidden_states": hidden, "encoder_attention_mask": mask.to(hidden.device)}

    def micro_conditions(self, batch_size: int, height: int, width: int, device, dtype) -> dict[str, torch.Tensor]:
        """The 1024 model's `added_cond_kwargs`: the image size (height, width) in pixels and its
        aspect ratio height / width. Models without them ignore them."""
        return {
            "resolution": torch.tensor([[float(height), float(width)]] * batch_size, device=device, dtype=dtype),
            "aspect_ratio": torch.tensor([[float(height) / float(width)]] * batch_size, device=device, dtype=dtype),
        }

    def predict(self, noisy_latents: torch.Tensor, timesteps: torch.Tensor, conditioning, batch=None, *, variance: bool = False):
        """Epsilon (B, 4, h, w) in the transformer's dtype; with `variance=True`, (epsilon, the
        variance channels or None). The size conditions are the batch's target size (else the
        latents' size in pixels)."""
        if not isinstance(conditioning, Mapping):
            raise TypeError("PixArt's conditioning is what encode_text returns (hidden states and their attention mask).")
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        size = getattr(batch, "size", None)
        if size:
            height, width = size
        else:
            height, width = (n * self.vae_scale_factor for n in noisy_latents.shape[-2:])
        mask = conditioning.get("encoder_attention_mask")
        out = transformer(
            noisy_latents.to(device, dtype),
            encoder_hidden_states=conditioning["encoder_hidden_states"].to(device, dtype),
            encoder_attention_mask=None if mask is None else mask.to(device),
            timestep=timesteps.to(device),
            added_cond_kwargs=self.micro_conditions(noisy_latents.shape[0], height, width, device, dtype),
        ).sample
        channels = noisy_latents.shape[1]
        eps, var = (out[:, :channels], out[:, channels:]) if out.shape[1] == 2 * channels else (out, None)
        return (eps, var) if variance else eps

    # ---------------------------------------------------------------- sampling

    def pipeline(self, sampler: NoiseScheduler | str | None = None, with_text_encoder: bool = True):
        """A PixArtAlphaPipeline (PixArtSigmaPipeline for Σ) sharing this model's components.
        Without the text encoder it takes prompt embeddings and keeps them in the transformer's dtype."""
        pipeline_class = self._pipeline_class()

        if sampler is None:
            scheduler = type(self.scheduler).from_config(self.scheduler.config, **self.schedule_overrides)
        else:
            scheduler = make_sampling_scheduler(sampler, self.scheduler.config, self.schedule_overrides)
        pipe = pipeline_class(
            tokenizer=self.tokenizer if with_text_encoder else None,
            text_encoder=base_module(self.text_encoder) if with_text_encoder else None,
            vae=base_module(self.vae),
            transformer=base_module(self.transformer),
            scheduler=scheduler,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, steps: int = 20,
               cfg_scale: float = 4.5, seed: int = 0, sampler: NoiseScheduler | str = NoiseScheduler.DDIM,
               device: torch.device | str | None = None):
        """One image (PIL) of exactly `width` x `height`.

        The prompts are encoded here, with the training's sequence length and layer skip, and
        the image is generated at the asked size (no aspect-ratio binning), rounded up to the
        latent patch (16 px) and resized back if needed. Parts keep their mode and device."""
        step = self.vae_scale_factor * int(base_module(self.transformer).config.patch_size)
        gen_h, gen_w = generation_size(height, width, step)
        with parked_for_sampling(self.parts, device, self.denoiser) as places:
            generator = torch.Generator(device="cpu").manual_seed(int(seed))
            with torch.no_grad():
                cond = self.encode_text([prompt])
                uncond = self.encode_text([negative_prompt or ""])
                places.release(["text_encoder"])  # encoded: T5 leaves before the transformer runs (the pipeline has none)
                dtype = module_dtype(self.transformer)
                latents = self.pipeline(sampler, with_text_encoder=False)(
                    prompt_embeds=cond["encoder_hidden_states"].to(dtype),
                    prompt_attention_mask=cond["encoder_attention_mask"],
                    negative_prompt=None,
                    negative_prompt_embeds=uncond["encoder_hidden_states"].to(dtype),
                    negative_prompt_attention_mask=uncond["encoder_attention_mask"],
                    height=gen_h,
                    width=gen_w,
                    num_inference_steps=int(steps),
                    guidance_scale=float(cfg_scale),
                    generator=generator,
                    use_resolution_binning=False,
                    clean_caption=False,
                    output_type="latent",
                ).images
                pixels = self.decode_latents(latents).float()
            from diffusers.image_processor import VaeImageProcessor

            image = VaeImageProcessor(vae_scale_factor=self.vae_scale_factor).postprocess(pixels.cpu(), output_type="pil")[0]
        return exact_size(image, width, height)

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in PixArt's original key layout (`.safetensors`), as OneTrainer's
        SAFETENSORS output of PixArt; the text encoder and VAE are the base model's."""
        from ot_gradio.models.pixart_single_file import save_original_transformer

        return save_original_transformer(
            path,
            base_module(self.transformer),
            plain_state_dict(self.transformer, "transformer"),
            dtype=torch_dtype(dtype),
            metadata=self.file_metadata(self.architecture, metadata),
        )

    def save_diffusers(self, directory: str | os.PathLike, dtype: DataType | torch.dtype | None) -> Path:
        """A diffusers folder (the family's pipeline's from_pretrained loads it), written atomically;
        weights are cast copy by copy."""

        def write_rest(tmp: Path) -> None:
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.scheduler.save_pretrained(tmp / "scheduler")
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)
