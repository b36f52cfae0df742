"""Flux.2 dev and Flux.2 Klein: load, encode, predict, sample, save (a flow-matching family: the
shared core in training/flow_matching.py draws t, makes the noisy input and the target
`noise - latents`; this module maps t to the transformer and back).

What Flux.2 is (OneTrainer's one FLUX_2 model type; diffusers' Flux2Pipeline and
Flux2KleinPipeline):
- dev and Klein share the transformer (Flux2Transformer2DModel), the VAE (AutoencoderKLFlux2)
  and the latent handling; they differ in the text encoder and the guidance embedding. OneTrainer
  tells them apart by the transformer's 48 heads (dev); here the text encoder's class decides
  (Mistral3ForConditionalGeneration: dev, Qwen3ForCausalLM: Klein), which agrees on the real
  models and also holds for the tiny ones.
- Text: dev renders each prompt with the pipeline's system message as Mistral's chat (no
  generation prompt), Klein as one Qwen3 user turn with the generation prompt and thinking off;
  both pad to `text_encoder_sequence_length` tokens (blank: 512, the pipelines') and stack three
  hidden states into the width (dev 10, 20, 30; Klein 9, 18, 27). The encoding is the
  pipelines' own (their `_get_*_prompt_embeds`), so training sees exactly what sampling sees;
  padding is not masked (the transformer takes no mask). Text ids are (0, 0, 0, token).
- Latents: the VAE's 32-channel latents are cut into 2x2 patches (128 channels at 1/16 of the
  image side) and normalised by the VAE's batch-norm statistics; `encode_images` returns them so,
  `predict` packs them into a token sequence with (0, row, column, 0) ids.
- The transformer reads t itself (the pipelines pass timestep / 1000) and predicts the velocity.
  dev has a guidance embedding: training feeds `transformer.guidance_scale`, sampling the CFG
  value; Klein has none and samples with real CFG (negative prompt) unless distilled.
- Loading: a hub id, a diffusers folder, `tiny:flux2-dev` / `tiny:flux2-klein`, or a BFL-layout
  transformer file (diffusers' from_single_file) with the other parts from a diffusers folder
  (the config folder) or the dev repo, as OneTrainer's transformer override does. Saving: a
  diffusers folder, or the transformer alone in the BFL layout (lora_keys_flux2.py).
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
    module_device,
    module_dtype,
    plain_state_dict,
    save_diffusers_folder,
    torch_dtype,
)
from ot_gradio.models.flux import FluxDev1, compute_dtype, load_flow_pipeline
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd15 import SINGLE_FILE_SUFFIXES, StableDiffusion15

DEFAULT_SEQUENCE_LENGTH = 512
HIDDEN_LAYERS = {"dev": (10, 20, 30), "klein": (9, 18, 27)}
TEXT_ENCODERS = {"Mistral3ForConditionalGeneration": "dev", "Qwen3ForCausalLM": "klein"}
# OneTrainer's Flux.2 layer presets
TRANSFORMER_PRESETS = {
    "full": [], "attn-mlp": ["attn", "ff.linear", "ff_context.linear"], "attn-only": ["attn"], "blocks": ["transformer_block"],
}
LLM_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"], "blocks": ["layers."]}


def _bn_stats(vae, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = vae.bn.running_mean.view(1, -1, 1, 1).to(like.device, like.dtype)
    std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(like.device, like.dtype)
    return mean, std


def latent_ids(latents: torch.Tensor) -> torch.Tensor:
    """(B, H*W, 4): (0, row, column, 0) of each patch token, as the pipelines build them."""
    b, _, h, w = latents.shape
    ids = torch.cartesian_prod(torch.arange(1), torch.arange(h), torch.arange(w), torch.arange(1))
    return ids.to(latents.device).unsqueeze(0).expand(b, -1, -1)


def text_ids(hidden: torch.Tensor) -> torch.Tensor:
    """(B, L, 4): (0, 0, 0, token index) of each text token."""
    b, length, _ = hidden.shape
    ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(length))
    return ids.to(hidden.device).unsqueeze(0).expand(b, -1, -1)


@register_family(ModelType.FLUX_2)
class Flux2:
    """The family interface (models/base.py) and the flow contract for Flux.2 dev and Klein."""

    model_type = ModelType.FLUX_2
    schedule_kind = "flow_matching"
    prediction_type = "flow"
    native_resolution = 1024
    denoiser = "transformer"
    text_encoder_names = ("text_encoder",)
    tokenizer_attrs = {"text_encoder": "tokenizer"}
    folder_parts = ("transformer", "text_encoder", "tokenizer", "vae", "scheduler")
    default_config_repo = "black-forest-labs/FLUX.2-dev"
    lora_base_model_version = "flux2"
    embedding_keys: dict[str, str] = {}  # no EMBEDDING method (as OneTrainer)
    transformer_file = True  # save_single_file writes the transformer alone (ORIGINAL_TRANSFORMER)
    single_file_layout = None  # transformer files are read in `load` (diffusers' converter), not load_flow_pipeline
    bucket_step = 16  # VAE 8 x patch 2

    def __init__(self, components: Mapping, is_distilled: bool = False):
        encoder = components.get("text_encoder")
        if encoder is None or components.get("tokenizer") is None:
            raise ModelLoadError("The model has no text_encoder / tokenizer; Flux.2 needs its Mistral3 (dev) or Qwen3 (Klein) "
                                 "text encoder. Pick a complete model.")
        variant = TEXT_ENCODERS.get(type(base_module(encoder)).__name__)
        if variant is None:
            raise ModelLoadError(f"The text encoder is a {type(encoder).__name__}; Flux.2 dev uses Mistral3ForConditionalGeneration "
                                 "and Klein Qwen3ForCausalLM. Pick a Flux.2 model.")
        self.variant = variant
        self.is_distilled = bool(is_distilled)
        self.tokenizer = components["tokenizer"]
        self.text_encoder = encoder
        self.vae = components["vae"]
        self.transformer = components["transformer"]
        self.scheduler = components["scheduler"]
        self.noise_scheduler = self.scheduler
        self._layer_skips: dict[str, int] = {}
        self.guidance_scale = 1.0
        self.text_encoder_sequence_length = None

    to = StableDiffusion15.to
    vae_id = StableDiffusion15.vae_id
    vae_scale_factor = StableDiffusion15.vae_scale_factor
    parts = FluxDev1.parts
    tokenizers = FluxDev1.tokenizers
    _part_names = classmethod(FluxDev1._part_names.__func__)
    set_attention = FluxDev1.set_attention
    configure_noise_schedule = FluxDev1.configure_noise_schedule

    # ---------------------------------------------------------------- loading

    @classmethod
    def _pipeline_class(cls):
        """Loading reads the pipeline class (dev or Klein) from the model's model_index.json."""
        from diffusers import DiffusionPipeline

        return DiffusionPipeline

    @classmethod
    def _transformer_class(cls):
        from diffusers import Flux2Transformer2DModel

        return Flux2Transformer2DModel

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None):
        """From a hub id, a diffusers folder or a tiny name; each part in its dtype (`dtypes`;
        float32 when not named)."""
        parts = cls._part_names()
        dtypes = dict(dtypes or {})
        unknown = set(dtypes) - set(parts)
        if unknown:
            raise ValueError(f"Unknown model part(s) {sorted(unknown)} in dtypes; expected {', '.join(parts)}.")
        per_part = {part: torch_dtype(dtypes.get(part)) for part in parts} | {"default": torch.float32}
        name = str(name or "").strip()
        path = Path(name).expanduser()
        if name and path.is_file() and path.suffix.lower() in SINGLE_FILE_SUFFIXES:
            pipe = cls._load_single_file(path, cache_dir=cache_dir, offline=offline, token=token, dtype=per_part, config_dir=config_dir)
        else:
            pipe = load_flow_pipeline(cls, name, cache_dir=cache_dir, offline=offline, token=token, dtype=per_part, config_dir=config_dir)
        if not isinstance(getattr(pipe, "transformer", None), cls._transformer_class()):
            raise ModelLoadError(f"'{name}' is not a Flux.2 model (no Flux2 transformer); pick the model type that matches it.")
        model = cls(pipe.components, is_distilled=bool(getattr(pipe.config, "is_distilled", False)))
        for part, module in model.parts.items():
            if module_dtype(module) != per_part[part]:
                module.to(dtype=per_part[part])
        return model

    @classmethod
    def _load_single_file(cls, path: Path, *, cache_dir, offline, token, dtype, config_dir):
        """A BFL-layout transformer file (`flux2-dev.safetensors`, a Klein transformer, or our
        ORIGINAL_TRANSFORMER output) through diffusers' from_single_file; the text encoder, VAE and
        configs from `config_dir` (a Flux.2 diffusers folder: dev or Klein decides) or the dev repo."""
        if config_dir and not (Path(config_dir).expanduser() / "model_index.json").is_file():
            raise ModelLoadError(f"The config folder '{config_dir}' is not a diffusers model (no model_index.json); point it "
                                 "to a Flux.2 diffusers folder (dev or Klein, whichever the file is).")
        if config_dir:
            config = str(Path(config_dir).expanduser())
        elif offline:
            config = StableDiffusion15._cached_config_repo.__func__(cls, cache_dir)
        else:
            config = cls.default_config_repo
        hub = {"local_files_only": True} if Path(config).is_dir() else {"cache_dir": cache_dir, "token": token, "local_files_only": offline}

        def load():
            transformer = cls._transformer_class().from_single_file(
                str(path), config=config, subfolder="transformer", torch_dtype=dtype["transformer"], **hub)
            return cls._pipeline_class().from_pretrained(config, transformer=transformer, dtype=dtype, **hub)

        hint = (f"The text encoder, VAE and configs come from '{config}'; check that it is the Flux.2 model (dev or Klein) "
                "the transformer file belongs to, or give that model's diffusers folder as the config folder.")
        return StableDiffusion15._guarded(str(path), load, hint)

    # ---------------------------------------------------------------- parts and options

    @property
    def lora_layer_presets(self) -> dict[str, dict[str, list[str]]]:
        return {"transformer": TRANSFORMER_PRESETS, "text_encoder": LLM_PRESETS}

    @property
    def has_guidance(self) -> bool:
        return bool(base_module(self.transformer).config.guidance_embeds)

    @property
    def text_encoder_sequence_length(self) -> int:
        return self._sequence_length

    @text_encoder_sequence_length.setter
    def text_encoder_sequence_length(self, length: int | None) -> None:
        """The token window, system message included (blank: 512, the pipelines'); the
        tokenizer's model_max_length follows it, so cached text embeddings are keyed by it."""
        self._sequence_length = int(length or DEFAULT_SEQUENCE_LENGTH)
        getattr(self.tokenizer, "tokenizer", self.tokenizer).model_max_length = self._sequence_length

    @property
    def layer_skips(self) -> dict[str, int]:
        return self._layer_skips

    @layer_skips.setter
    def layer_skips(self, skips: Mapping[str, int]) -> None:
        """Refused: the pipelines read three fixed hidden layers, and so does training."""
        bad = [part for part, skip in dict(skips).items() if int(skip or 0)]
        if bad:
            raise ValueError(f"{bad[0]}_layer_skip: Flux.2 reads three fixed hidden layers of its text encoder; set it to 0")
        self._layer_skips = {}

    def configure_flow(self, config) -> None:
        """The run's guidance value (dev only: Klein has no guidance embedding) and token window.
        The text encoder stays frozen, as in OneTrainer (the pipelines' LoRA loader reads
        transformer keys only)."""
        if config.text_encoder.train:
            raise ValueError("text_encoder.train: Flux.2 trains the transformer only (as OneTrainer; the pipelines load "
                             "transformer LoRAs only); turn it off")
        self.guidance_scale = float(config.transformer.guidance_scale)
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)

    # ---------------------------------------------------------------- text

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, 3 x width)}: the pipeline's prompt embeddings."""
        from diffusers import Flux2KleinPipeline, Flux2Pipeline
        from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        encoder = base_module(self.text_encoder)
        layers = HIDDEN_LAYERS[self.variant]
        depth = int(getattr(encoder.config, "text_config", encoder.config).num_hidden_layers)
        if depth < max(layers):
            raise ModelLoadError(f"The text encoder has {depth} layers; Flux.2 {self.variant} reads hidden states {layers}.")
        common = {"dtype": compute_dtype(encoder), "device": module_device(encoder),
                  "max_sequence_length": self.text_encoder_sequence_length, "hidden_states_layers": layers}
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            if self.variant == "dev":
                hidden = Flux2Pipeline._get_mistral_3_small_prompt_embeds(
                    encoder, self.tokenizer, texts, system_message=SYSTEM_MESSAGE, **common)
            else:
                hidden = Flux2KleinPipeline._get_qwen3_prompt_embeds(encoder, self.tokenizer, texts, **common)
        return {"encoder_hidden_states": hidden}

    # ---------------------------------------------------------------- latents

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Patchified, batch-norm-normalised latents (B, 128, H/16, W/16) for pixels in [-1, 1];
        a sample of the latent distribution by default (OneTrainer's), its mean with sample=False."""
        from diffusers import Flux2Pipeline

        dist = self.vae.encode(pixels.to(module_device(self.vae), module_dtype(self.vae))).latent_dist
        latents = Flux2Pipeline._patchify_latents(dist.sample(generator) if sample else dist.mean)
        mean, std = _bn_stats(self.vae, latents)
        return (latents - mean) / std

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] for latents of `encode_images`."""
        from diffusers import Flux2Pipeline

        latents = latents.to(module_device(self.vae), module_dtype(self.vae))
        mean, std = _bn_stats(self.vae, latents)
        return self.vae.decode(Flux2Pipeline._unpatchify_latents(latents * std + mean)).sample

    def image_seq_len(self, latents: torch.Tensor) -> int:
        return latents.shape[-2] * latents.shape[-1]

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, 128, h, w) for noisy latents at noise fraction `t` (B,)."""
        transformer = self.transformer
        device, dtype = module_device(transformer), compute_dtype(transformer)
        b, c, h, w = noisy.shape
        hidden = conditioning["encoder_hidden_states"].to(device, dtype)
        noisy = noisy.to(device, dtype)
        guidance = torch.full((b,), self.guidance_scale, device=device, dtype=torch.float32) if self.has_guidance else None
        out = transformer(
            hidden_states=noisy.reshape(b, c, h * w).permute(0, 2, 1), encoder_hidden_states=hidden,
            timestep=t.to(device, dtype).expand(b), img_ids=latent_ids(noisy), txt_ids=text_ids(hidden), guidance=guidance,
            return_dict=False,
        )[0]
        return out.permute(0, 2, 1).reshape(b, c, h, w)

    # ---------------------------------------------------------------- sampling

    def pipeline(self):
        """The dev or Klein pipeline sharing this model's (possibly adapter-wrapped) parts."""
        from diffusers import Flux2KleinPipeline, Flux2Pipeline

        components = {part: base_module(module) for part, module in self.parts.items()}
        scheduler = type(self.scheduler).from_config(self.scheduler.config)
        if self.variant == "dev":
            pipe = Flux2Pipeline(scheduler=scheduler, tokenizer=self.tokenizer, **components)
        else:
            pipe = Flux2KleinPipeline(scheduler=scheduler, tokenizer=self.tokenizer, is_distilled=self.is_distilled, **components)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """dev: the prompt and the distilled guidance value; Klein: real CFG with the negative prompt."""
        dtype = compute_dtype(self.transformer)
        inputs = {"prompt_embeds": self.encode_text([prompt])["encoder_hidden_states"].to(dtype), "guidance_scale": float(cfg_scale)}
        if self.variant == "klein" and cfg_scale > 1 and not self.is_distilled:
            inputs["negative_prompt_embeds"] = self.encode_text([negative_prompt or ""])["encoder_hidden_states"].to(dtype)
        return inputs

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, steps: int = 28,
               cfg_scale: float = 4.0, seed: int = 0, sampler: NoiseScheduler | str = NoiseScheduler.EULER,
               device: torch.device | str | None = None):
        """One image (PIL) of exactly `width` x `height`, generated at the next multiple of 16 px
        with the pipeline's flow-matching Euler scheduler and its empirical shift (every sampler
        choice: the only sampler Flux.2 ships with). Parts keep their mode and device."""
        step = self.bucket_step
        gen_h, gen_w = -(-int(height) // step) * step, -(-int(width) // step) * step
        modules = self.parts
        was_training = {name: m.training for name, m in modules.items()}
        devices = {name: module_device(m) for name, m in modules.items()}
        target = torch.device(device) if device is not None else devices["transformer"]
        try:
            for m in modules.values():
                m.eval()
                m.to(target)
            generator = torch.Generator(device="cpu").manual_seed(int(seed))
            with torch.no_grad():
                packed = self.pipeline()(
                    **self.pipeline_inputs(prompt, negative_prompt, cfg_scale), height=gen_h, width=gen_w,
                    num_inference_steps=int(steps), generator=generator, output_type="latent",
                ).images
                if packed.dim() == 3:  # dev: the packed, normalised tokens
                    b, _, c = packed.shape
                    pixels = self.decode_latents(packed.permute(0, 2, 1).reshape(b, c, gen_h // step, gen_w // step))
                else:  # Klein: the VAE's own latents (already unpatchified and denormalised)
                    pixels = self.vae.decode(packed.to(module_device(self.vae), module_dtype(self.vae))).sample
                pixels = pixels.float()
            from diffusers.image_processor import VaeImageProcessor

            image = VaeImageProcessor(vae_scale_factor=self.vae_scale_factor).postprocess(pixels.cpu(), output_type="pil")[0]
        finally:
            for name, m in modules.items():
                m.to(devices[name])
                m.train(was_training[name])
        if image.size != (int(width), int(height)):
            image = image.resize((int(width), int(height)))
        return image

    # ---------------------------------------------------------------- saving

    def save_diffusers(self, directory: str | os.PathLike, dtype: DataType | torch.dtype | None) -> Path:
        """A diffusers folder (Flux2Pipeline / Flux2KleinPipeline.from_pretrained loads it), written atomically."""

        def write_rest(tmp: Path) -> None:
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.scheduler.save_pretrained(tmp / "scheduler")
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in the BFL layout (ComfyUI's diffusion-model loader and
        diffusers' `from_single_file` read it); the text encoder and VAE are the base model's."""
        from ot_gradio.training.lora_keys_flux2 import save_original_transformer

        for name, module in self.parts.items():
            plain_state_dict(module, name)  # no LoRA layers left in any part
        return save_original_transformer(
            path, base_module(self.transformer), plain_state_dict(self.transformer, "transformer"), torch_dtype(dtype),
            {"modelspec.architecture": f"flux-2-{self.variant}", "ot_gradio.model_type": self.model_type.value, **(metadata or {})},
        )

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Identity renames for kohya LoRA files (the `_`-joined names cannot be split back by rule)."""
        from ot_gradio.training.lora_keys_sd3 import layer_paths

        return {part: {p: p for p in layer_paths(base_module(getattr(self, part)))} for part in ("transformer", "text_encoder")}
