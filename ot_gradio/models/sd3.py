"""Stable Diffusion 3 and 3.5: load, encode, predict, sample, save (the flow contract of
models/base.py; the training objective is training/flow_matching.py's).

What SD 3 is (diffusers' StableDiffusion3Pipeline, OneTrainer's StableDiffusion3Model):
- Three text encoders: CLIP-L (`text_encoder`) and OpenCLIP-G (`text_encoder_2`), both
  `CLIPTextModelWithProjection`, and T5 v1.1 XXL (`text_encoder_3`). The CLIPs' second-to-last
  hidden states side by side (768 + 1280) are zero-padded to T5's width (4096) and put before
  T5's tokens along the sequence; the pooled input is both CLIP projections side by side. Clip
  skip counts from that second-to-last layer per CLIP (as SDXL); T5's skip takes an earlier layer
  with T5's final norm. T5 reads 77 tokens (OneTrainer's length; `text_encoder_3_sequence_length`
  when the config has it), in training and in samples alike, with no padding mask, as trained.
- The denoiser is an MMDiT (`SD3Transformer2DModel`, patch 2) that reads timestep t * 1000 and
  predicts the velocity `noise - latents` in the (B, 16, H, W) latent layout (it patches itself).
- The VAE has 16 latent channels; latents are normalised with its `shift_factor` and
  `scaling_factor` (SD 15's encode_images / decode_latents apply both).
- FlowMatchEulerDiscreteScheduler with shift 3.0 (SD 3.5 too); sampling uses it with CFG and
  negative prompts. SD 3.5 Large/Medium differ only in the transformer's config (q/k RMS norms,
  Medium's second attention in its first blocks), which diffusers reads from the model.

Loading: a hub id, a diffusers folder, `tiny:sd3` / `tiny:sd35`, or SAI's single file (as the SD
3.5 files are shipped) through `StableDiffusion3Pipeline.from_single_file` with the configs (and
the parts the file lacks, like T5) from a local diffusers folder given as the config folder, or
the family's hub repo. The loading paths and their errors are SD 1.5's (sd15.py). Saving: a
diffusers folder, or the transformer and VAE as a single file in SAI's layout
(models/sd3_single_file.py). LoRA keys: training/lora_keys_sd3.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType, NoiseScheduler
from ot_gradio.models.common import (
    ModelLoadError,
    base_module,
    exact_size,
    generation_size,
    module_device,
    module_dtype,
    parked_for_sampling,
    plain_state_dict,
    save_diffusers_folder,
    torch_dtype,
)
from ot_gradio.models.pixart import _no_fp16_autocast
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd15 import StableDiffusion15
from ot_gradio.models.sdxl import StableDiffusionXL

T5_PART = "text_encoder_3"
CLIP_PARTS = ("text_encoder", "text_encoder_2")
DEFAULT_T5_SEQUENCE_LENGTH = 77
TOKENIZERS = {"text_encoder": "tokenizer", "text_encoder_2": "tokenizer_2", "text_encoder_3": "tokenizer_3"}
# OneTrainer's LAYER_PRESETS for SD 3's transformer; the text encoders' own names ("blocks" and
# "full" adapt every layer of a text encoder, as OneTrainer's text encoder LoRA does)
TRANSFORMER_PRESETS = {"full": [], "attn-mlp": ["attn", "ff.net"], "attn-only": ["attn"], "blocks": ["transformer_block"]}
CLIP_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"], "blocks": []}
T5_PRESETS = {"full": [], "attn-mlp": ["SelfAttention", "DenseReluDense"], "attn-only": ["SelfAttention"], "blocks": []}


@register_family(ModelType.STABLE_DIFFUSION_3)
class StableDiffusion3:
    """The family interface (models/base.py) and the flow contract for Stable Diffusion 3."""

    model_type = ModelType.STABLE_DIFFUSION_3
    schedule_kind = "flow_matching"
    prediction_type = "flow"
    native_resolution = 1024
    denoiser = "transformer"
    text_encoder_names = ("text_encoder", "text_encoder_2", "text_encoder_3")
    tokenizer_folders = TOKENIZERS
    default_config_repo = "stabilityai/stable-diffusion-3-medium-diffusers"
    lora_base_model_version = "sd3"
    modelspec_architecture = "stable-diffusion-v3-medium"  # SAI model spec, in saved files' headers
    embedding_keys = {"text_encoder": "clip_l", "text_encoder_2": "clip_g", "text_encoder_3": "t5"}  # OneTrainer's
    bucket_step = 16  # VAE 8 x patch 2
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": CLIP_PRESETS,
                          "text_encoder_2": CLIP_PRESETS, "text_encoder_3": T5_PRESETS}
    _pipeline_load_kwargs: dict = {}

    def __init__(self, components: Mapping):
        for part, attr in TOKENIZERS.items():
            if components.get(part) is None or components.get(attr) is None:
                raise ModelLoadError(
                    f"The model has no {part} / {attr}; {self.model_type.value} needs CLIP-L, CLIP-G and T5. "
                    "Pick a complete model (or its single file with a complete diffusers folder as the config folder)."
                )
            setattr(self, part, components[part])
            setattr(self, attr, components[attr])
        self.vae = components["vae"]
        self.transformer = components["transformer"]
        self.scheduler = components["scheduler"]  # FlowMatchEulerDiscreteScheduler with the model's shift
        self.noise_scheduler = self.scheduler
        self._layer_skips: dict[str, int] = {}
        self.t5_sequence_length = DEFAULT_T5_SEQUENCE_LENGTH

    # the VAE side is SD's (encode_images / decode_latents apply shift_factor and scaling_factor)
    to = StableDiffusion15.to
    vae_id = StableDiffusion15.vae_id
    vae_scale_factor = StableDiffusion15.vae_scale_factor
    encode_images = StableDiffusion15.encode_images
    decode_latents = StableDiffusion15.decode_latents
    # loading paths and their errors: SD 1.5's, with this family's pipeline and hub repo
    _guarded = staticmethod(StableDiffusion15._guarded)
    _load_pipeline = classmethod(StableDiffusion15._load_pipeline.__func__)
    _cached_config_repo = classmethod(StableDiffusion15._cached_config_repo.__func__)

    # ---------------------------------------------------------------- loading

    @classmethod
    def _pipeline_class(cls):
        from diffusers import StableDiffusion3Pipeline

        return StableDiffusion3Pipeline

    @classmethod
    def _load_single_file(cls, path: Path, *, cache_dir, offline, token, config_dir):
        """SAI's single file: with its text encoders in it (the `incl_clips` files) diffusers loads
        it whole; without (sd3.5_large.safetensors: MMDiT + VAE) the transformer and VAE come
        from the file and the rest from the config folder or repo, which diffusers' pipeline
        loader does not do by itself."""
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                has_text = any(k.startswith("text_encoders.") for k in f.keys())
        except Exception as e:
            raise ModelLoadError(f"'{path}' is not a readable .safetensors file ({e}); pick an SD 3 / 3.5 single file.") from e
        if has_text:
            return StableDiffusion15._load_single_file.__func__(
                cls, path, cache_dir=cache_dir, offline=offline, token=token, config_dir=config_dir
            )
        if config_dir and not (Path(config_dir).expanduser() / "model_index.json").is_file():
            raise ModelLoadError(
                f"The config folder '{config_dir}' is not a diffusers model (no model_index.json); "
                f"point it to a diffusers folder of {cls.model_type.value}."
            )
        if config_dir:
            config = str(Path(config_dir).expanduser())
        elif offline:
            config = cls._cached_config_repo(cache_dir)
        else:
            config = cls.default_config_repo
        local = offline or bool(config_dir)
        hub = {"cache_dir": cache_dir, "token": token, "local_files_only": local}

        def load():
            from diffusers import AutoencoderKL, SD3Transformer2DModel

            transformer = SD3Transformer2DModel.from_single_file(str(path), config=config, subfolder="transformer", **hub)
            vae = AutoencoderKL.from_single_file(str(path), config=config, subfolder="vae", **hub)
            return cls._pipeline_class().from_pretrained(config, transformer=transformer, vae=vae, **hub)

        hint = (
            f"The text encoders and configs come from '{config_dir}'; check that it is a {cls.model_type.value} diffusers "
            "folder and the file an SD 3 / 3.5 checkpoint."
            if config_dir
            else f"The text encoders and configs come from the hub repo '{cls.default_config_repo}'; check your network "
            "and access token (SD 3 repos are gated), or give a local diffusers folder as the config folder."
        )
        return cls._guarded(str(path), load, hint)

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None):
        """From a hub id, a diffusers folder, `tiny:sd3` or a single file (configs and missing parts
        from `config_dir`, else the hub repo). Parts are cast to `dtypes` (float32 when not named)."""
        dtypes = dict(dtypes or {})
        parts = ("transformer", *cls.text_encoder_names, "vae")
        unknown = set(dtypes) - set(parts)
        if unknown:
            raise ValueError(f"Unknown model part(s) {sorted(unknown)} in dtypes; expected {', '.join(parts)}.")
        name = str(name or "").strip()
        pipe = cls._load_pipeline(name, cache_dir=cache_dir, offline=offline, token=token, config_dir=config_dir)
        from diffusers import SD3Transformer2DModel

        if not isinstance(getattr(pipe, "transformer", None), SD3Transformer2DModel):
            raise ModelLoadError(f"'{name}' is not a Stable Diffusion 3 model (no SD3 transformer); pick the model type that matches it.")
        model = cls(pipe.components)
        for part in parts:
            if module_dtype(getattr(model, part)) != torch_dtype(dtypes.get(part)):
                getattr(model, part).to(dtype=torch_dtype(dtypes.get(part)))
        return model

    # ---------------------------------------------------------------- parts and options

    @property
    def parts(self) -> dict[str, torch.nn.Module]:
        return {part: getattr(self, part) for part in ("transformer", *self.text_encoder_names, "vae")}

    @property
    def tokenizers(self) -> dict:
        """The tokenizer of each text encoder part (the live ones training and sampling use)."""
        return {part: getattr(self, attr) for part, attr in TOKENIZERS.items()}

    @property
    def layer_skips(self) -> dict[str, int]:
        return self._layer_skips

    @layer_skips.setter
    def layer_skips(self, skips: Mapping[str, int]) -> None:
        """Checked here, so a skip the encoder has no layer for fails before training (the CLIPs
        already read their second-to-last layer)."""
        checked = {}
        for part, skip in dict(skips).items():
            skip = int(skip or 0)
            config = base_module(getattr(self, part)).config
            layers = int(getattr(config, "num_hidden_layers", None) or config.num_layers)
            top = layers - 1 if part in CLIP_PARTS else layers
            if not 0 <= skip <= top:
                raise ValueError(f"{part}_layer_skip: {skip} is out of range; this model's {part.replace('_', ' ')} allows 0 to {top}")
            checked[part] = skip
        self._layer_skips = checked

    def configure_noise_schedule(self, *, prediction_type: str | None = None, zero_terminal_snr: bool = False) -> None:
        if prediction_type:
            raise ValueError(
                "force_v_prediction / force_epsilon_prediction: SD 3 is a flow-matching model that predicts the velocity; "
                "turn these options off"
            )
        if zero_terminal_snr:
            raise ValueError(
                "rescale_noise_scheduler_to_zero_terminal_snr: SD 3 is a flow-matching model (its last timestep is pure "
                "noise already); turn this option off"
            )

    def configure_flow(self, config) -> None:
        """T5's token window for the run (the tokenizer's model_max_length follows it, so cached
        text embeddings are keyed by it). A T5 LoRA with diffusers keys is refused here, before training."""
        from ot_gradio.training.lora_keys_sd3 import check_lora_output

        check_lora_output(config)
        length = getattr(config, "text_encoder_3_sequence_length", None)
        self.t5_sequence_length = int(length or DEFAULT_T5_SEQUENCE_LENGTH)
        self.tokenizer_3.model_max_length = self.t5_sequence_length

    def set_attention(self, mechanism: str, device: torch.device | str | None = None) -> None:
        """SDP (PyTorch's scaled-dot-product attention; DEFAULT is the same here: SD 3's joint
        attention has no classic processor), XFORMERS or FLASH (CUDA only, diffusers' backends)."""
        mechanism = str(getattr(mechanism, "value", mechanism)).upper()
        transformer = base_module(self.transformer)
        on_cuda = torch.device(device).type == "cuda" if device is not None else module_device(transformer).type == "cuda"
        if mechanism in ("DEFAULT", "SDP"):
            transformer.set_attention_backend("native")
        elif mechanism in ("XFORMERS", "FLASH"):
            if not on_cuda:
                raise ValueError(f"attention_mechanism: {mechanism} needs a CUDA GPU; use SDP")
            transformer.set_attention_backend("xformers" if mechanism == "XFORMERS" else "_native_flash")
        else:
            raise ValueError(f"attention_mechanism: unknown value {mechanism!r}; use SDP, DEFAULT, XFORMERS or FLASH")

    # ---------------------------------------------------------------- text

    def _encode_clip(self, part: str, texts: Sequence[str], grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden states of the second-to-last layer minus the skip, projected pooled output at
        the first end-of-text token, found from the tokenizer so added embedding tokens never move it)."""
        tokenizer, encoder = self.tokenizers[part], getattr(self, part)
        ids = tokenizer(
            list(texts), padding="max_length", max_length=tokenizer.model_max_length, truncation=True, return_tensors="pt"
        ).input_ids.to(module_device(encoder))
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            out = encoder(ids, output_hidden_states=True)
            hidden = out.hidden_states[-(2 + self.layer_skips.get(part, 0))]
            pooled = StableDiffusionXL._pooled(encoder, out.last_hidden_state, ids, tokenizer.eos_token_id)
        return hidden, pooled

    def _encode_t5(self, texts: Sequence[str], grad: bool) -> torch.Tensor:
        encoder = self.text_encoder_3
        ids = self.tokenizer_3(
            list(texts), padding="max_length", max_length=self.t5_sequence_length, truncation=True,
            add_special_tokens=True, return_tensors="pt",
        ).input_ids
        device = module_device(encoder)
        skip = self.layer_skips.get(T5_PART, 0)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()), _no_fp16_autocast(device):
            if skip <= 0:
                return encoder(ids.to(device))[0]
            out = encoder(ids.to(device), output_hidden_states=True)
            return base_module(encoder).encoder.final_layer_norm(out.hidden_states[-(skip + 1)])

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": CLIP-L | CLIP-G padded to T5's width, then T5's tokens;
        "pooled_projections": CLIP-L's and CLIP-G's projections side by side}, as
        StableDiffusion3Pipeline.encode_prompt builds them. `captions` is one list or one per
        text encoder part (caption dropout per encoder); gradients flow through the parts in `grad`."""
        texts = {part: list(captions[part] if isinstance(captions, Mapping) else captions) for part in self.text_encoder_names}
        (h1, p1), (h2, p2) = (self._encode_clip(part, texts[part], part in grad) for part in CLIP_PARTS)
        t5 = self._encode_t5(texts[T5_PART], T5_PART in grad)
        device = t5.device
        clip = torch.cat([h1.to(device), h2.to(device)], dim=-1)
        clip = torch.nn.functional.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
        return {
            "encoder_hidden_states": torch.cat([clip.to(t5.dtype), t5], dim=-2),
            "pooled_projections": torch.cat([p1.to(device), p2.to(device)], dim=-1),
        }

    # ---------------------------------------------------------------- training

    def image_seq_len(self, latents: torch.Tensor) -> int:
        patch = int(base_module(self.transformer).config.patch_size)
        return (latents.shape[-2] // patch) * (latents.shape[-1] // patch)

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, 16, H, W) for noisy latents at noise fraction `t` (B,), in the
        transformer's dtype; the transformer reads the timestep as t * 1000."""
        device, dtype = module_device(self.transformer), module_dtype(self.transformer)
        b = noisy.shape[0]
        return self.transformer(
            hidden_states=noisy.to(device, dtype),
            encoder_hidden_states=conditioning["encoder_hidden_states"].to(device, dtype),
            pooled_projections=conditioning["pooled_projections"].to(device, dtype),
            timestep=(t.to(device, torch.float32) * 1000).expand(b),
            return_dict=False,
        )[0]

    # ---------------------------------------------------------------- sampling

    def pipeline(self):
        """A StableDiffusion3Pipeline sharing this model's (possibly adapter-wrapped) parts."""
        components = {part: base_module(module) for part, module in self.parts.items()}
        components.update({attr: self.tokenizers[part] for part, attr in TOKENIZERS.items()})
        pipe = self._pipeline_class()(scheduler=type(self.scheduler).from_config(self.scheduler.config), **components)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def prompt_inputs(self, prompt: str, negative_prompt: str = "") -> dict:
        """Embeddings made by `encode_text` (per-encoder clip skip and the trained T5 length, which
        the pipeline's own encoding cannot give); the negative prompt is encoded even when empty,
        as the pipeline does."""
        cond, uncond = self.encode_text([prompt]), self.encode_text([negative_prompt or ""])
        dtype = module_dtype(self.transformer)
        return {
            "prompt_embeds": cond["encoder_hidden_states"].to(dtype),
            "pooled_prompt_embeds": cond["pooled_projections"].to(dtype),
            "negative_prompt_embeds": uncond["encoder_hidden_states"].to(dtype),
            "negative_pooled_prompt_embeds": uncond["pooled_projections"].to(dtype),
        }

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, steps: int = 28,
               cfg_scale: float = 7.0, seed: int = 0, sampler: NoiseScheduler | str = NoiseScheduler.EULER,
               device: torch.device | str | None = None):
        """One image (PIL) of exactly `width` x `height`, generated at the next multiple of 16 px
        with CFG and the negative prompt. Every sampler choice samples with the model's
        flow-matching Euler scheduler and its shift (the one SD 3 ships with, as in OneTrainer).
        Parts keep their mode and device."""
        gen_h, gen_w = generation_size(height, width, self.bucket_step)
        with parked_for_sampling(self.parts, device, self.denoiser), torch.no_grad():
            generator = torch.Generator(device="cpu").manual_seed(int(seed))
            image = self.pipeline()(
                **self.prompt_inputs(prompt, negative_prompt), height=gen_h, width=gen_w,
                num_inference_steps=int(steps), guidance_scale=float(cfg_scale), generator=generator, output_type="pil",
            ).images[0]
        return exact_size(image, width, height)

    # ---------------------------------------------------------------- saving

    def save_diffusers(self, directory: str | os.PathLike, dtype: DataType | torch.dtype | None) -> Path:
        """A diffusers folder (StableDiffusion3Pipeline.from_pretrained loads it), written atomically."""

        def write_rest(tmp: Path) -> None:
            for part, attr in TOKENIZERS.items():
                self.tokenizers[part].save_pretrained(tmp / attr)
            self.scheduler.save_pretrained(tmp / "scheduler")
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer and VAE in SAI's single-file layout (models/sd3_single_file.py), as the
        SD 3.5 files ship; the text encoders are the base model's."""
        from ot_gradio.models.sd3_single_file import save_sd3_single_file

        for name, module in self.parts.items():
            plain_state_dict(module, name)  # no LoRA layers left in any part
        return save_sd3_single_file(
            path, base_module(self.transformer), base_module(self.vae), dtype,
            metadata={"modelspec.architecture": self.modelspec_architecture, "ot_gradio.model_type": self.model_type.value,
                      **(metadata or {})},
        )

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Renames for kohya LoRA files (training/lora_keys_sd3.py): none, the names are diffusers'
        as OneTrainer writes them; given so reading a file maps every `_`-joined name back exactly."""
        from ot_gradio.training.lora_keys_sd3 import module_names

        return module_names(self)


@register_family(ModelType.STABLE_DIFFUSION_35)
class StableDiffusion35(StableDiffusion3):
    """SD 3.5 Large / Medium / Large Turbo: the same family; the transformer's config carries the
    q/k norms and Medium's dual attention layers."""

    model_type = ModelType.STABLE_DIFFUSION_35
    default_config_repo = "stabilityai/stable-diffusion-3.5-large"
    lora_base_model_version = "sd3.5"
    modelspec_architecture = "stable-diffusion-v3.5-large"
