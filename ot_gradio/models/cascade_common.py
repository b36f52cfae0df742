"""What Würstchen 2 and Stable Cascade share: the prior's noise schedule, loading the three
models they are made of, encoding images with the EffNet encoder, sampling through prior,
decoder and VQGAN, and saving the prior.

Training, as OneTrainer does it (BaseWuerstchenSetup): the image is scaled to 3/4 of its size,
normalised with ImageNet's mean and std and encoded by the EffNet encoder; those 16-channel
features are the prior's latent image (Würstchen 2 maps them to (x + 1) / 42, Stable Cascade uses
them as they are). Noise follows the continuous cosine schedule of `DDPMWuerstchenScheduler`
(alpha_cumprod(r) = cos^2((r + s) / (1 + s) * pi / 2) / cos^2(s / (1 + s) * pi / 2), clamped to
[1e-4, 0.9999], s = 0.008); the prior gets r itself as its timestep input and predicts the noise
(epsilon; v-prediction does not exist for these models).

The trainer draws integer timesteps in [0, 1000) for every family; `ContinuousSchedule` maps
timestep i to t = i / 1000 and then to the family's r (Würstchen 2: t * 1.08 + 0.001; Stable
Cascade: t + 0.001; both clamped to [0.001, 1]), and lists alpha_cumprod and betas per integer
timestep so timestep loss weights (P2, min-SNR, ...) and generalized offset noise use the real
schedule.

Where the parts come from (cascade_loading.py resolves and loads them): the base model is the prior (tokenizer, text encoder, prior,
scheduler); `decoder.model_name` is the decoder model (stage B and the VQGAN, and Würstchen's
decoder text encoder); `effnet_encoder.model_name` the EffNet weights; `prior.model_name`
replaces the prior network only. Blank ones default to the hub models of the family.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ot_gradio.config.enums import DataType, NoiseScheduler
from ot_gradio.models.attention import classic_processor
from ot_gradio.models.cascade_loading import Loader, Source, load_effnet, resolve_source
from ot_gradio.models.common import (
    ModelLoadError,
    base_module,
    module_device,
    module_dtype,
    part_dtypes,
    save_diffusers_folder,
    weights_fingerprint,
)
from ot_gradio.models.family import Family
from ot_gradio.models.sampling_parts import denoiser_in_its_dtype
from ot_gradio.models.tiny import is_tiny, resolve_tiny

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
EFFNET_IMAGE_SCALE = 0.75
NUM_TRAIN_TIMESTEPS = 1000
DECODER_PIPELINE_KEYS = ("latent_dim_scale",)  # what the decoder pipeline's config keeps
SCHEDULE_S = 0.008


# ------------------------------------------------------------------ noise schedule


def gdf_alpha_cumprod(r: torch.Tensor, s: float = SCHEDULE_S) -> torch.Tensor:
    """alpha_cumprod of the cosine schedule at continuous r in [0, 1] (DDPMWuerstchenScheduler, scaler 1)."""
    r = r.double()
    s_ = torch.tensor(s, dtype=torch.float64)
    init = torch.cos(s_ / (1 + s_) * math.pi * 0.5) ** 2
    return (torch.cos((r + s_) / (1 + s_) * math.pi * 0.5) ** 2 / init).clamp(1e-4, 0.9999)


class ContinuousSchedule:
    """The trainer's view of the continuous schedule: integer timesteps with their alpha_cumprod
    and betas, plus the mapping to the prior's r and the noising itself."""

    def __init__(self, scale: float, offset: float, s: float = SCHEDULE_S, num_train_timesteps: int = NUM_TRAIN_TIMESTEPS):
        self.scale, self.offset, self.s = float(scale), float(offset), float(s)
        self.config = SimpleNamespace(num_train_timesteps=int(num_train_timesteps), prediction_type="epsilon")
        ratios = self.ratio(torch.arange(num_train_timesteps))
        self.alphas_cumprod = gdf_alpha_cumprod(ratios, s).float()
        previous = torch.cat([torch.ones(1), self.alphas_cumprod[:-1]])
        self.betas = (1.0 - self.alphas_cumprod / previous).clamp(min=0.0)

    def ratio(self, timesteps: torch.Tensor) -> torch.Tensor:
        """The prior's r for integer timesteps (float32, same device)."""
        t = timesteps.float() / self.config.num_train_timesteps
        return (t * self.scale + self.offset).clamp(0.001, 1.0)

    def add_noise(self, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        ac = gdf_alpha_cumprod(self.ratio(timesteps.to(latents.device)), self.s).to(latents.dtype)
        ac = ac.view(-1, *([1] * (latents.ndim - 1)))
        return ac.sqrt() * latents + (1 - ac).sqrt() * noise


# ------------------------------------------------------------------ attention


def set_prior_attention(prior: torch.nn.Module, mechanism, device: torch.device | str | None) -> None:
    """DEFAULT, SDP, XFORMERS or FLASH for every attention layer of the prior (as OneTrainer;
    models/attention.py)."""
    from diffusers.models.attention_processor import Attention

    make = classic_processor(mechanism, torch.device(device).type if device is not None else module_device(prior).type)
    for module in prior.modules():
        if isinstance(module, Attention):
            module.set_processor(make())


# ------------------------------------------------------------------ the family


class CascadeFamily(Family):
    """The family interface (models/base.py) for a prior trained on EffNet latents; subclasses
    give the networks, the text conditioning and the latent scaling."""

    denoiser = "prior"
    text_encoder_names = ("text_encoder",)
    # parts used in every training step; the decoder parts stay on the CPU until sampling
    training_parts = ("prior", "text_encoder", "effnet_encoder")
    lora_base_model_version = ""
    lora_layer_presets: dict[str, dict[str, list[str]]] = {}
    timestep_scale = 1.0
    timestep_offset = 0.001
    decoder_steps = 10
    decodes_latents = False  # the decoder (stage B) is a diffusion model: debug_mode writes no images
    hub_example = ""
    family_name = ""  # the model's name in messages
    decoder_default = ""  # the decoder model of a blank decoder.model_name (with a hub prior)
    decoder_examples = ""  # the decoder models a local prior without one is told of
    prior_example = ""  # what prior.model_name may name, in its messages
    prior_pipeline_keys: tuple[str, ...] = ("resolution_multiple",)  # what the prior pipeline's config keeps
    # A1111-style embedding file key of the prior's text encoder (a CLIP ViT-bigG, as SDXL's second)
    embedding_keys = {"text_encoder": "clip_g"}
    output_embedding_parts = ("text_encoder",)
    prompt_key = "prompt_embeds"  # the conditioning's text sequence (`_conditioning`)

    def __init__(self, *, tokenizer, text_encoder, prior, scheduler, prior_pipeline_config, decoder, decoder_vqgan,
                 decoder_scheduler, decoder_pipeline_config, effnet_encoder, decoder_tokenizer=None, decoder_text_encoder=None):
        self.tokenizer = tokenizer
        self.text_encoder = text_encoder
        self.prior = prior
        self.scheduler = scheduler
        self.prior_pipeline_config = dict(prior_pipeline_config)
        self.decoder = decoder
        self.decoder_vqgan = decoder_vqgan
        self.decoder_scheduler = decoder_scheduler
        self.decoder_pipeline_config = dict(decoder_pipeline_config)
        self.decoder_tokenizer = decoder_tokenizer
        self.decoder_text_encoder = decoder_text_encoder
        self.effnet_encoder = effnet_encoder.eval()
        self.noise_scheduler = ContinuousSchedule(self.timestep_scale, self.timestep_offset, float(scheduler.config.s))
        self.layer_skips: dict[str, int] = {}

    # ------------------------------------------------------------ loading

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None,
             part_models: Mapping[str, str] | None = None):
        """The prior from `name` (hub id, diffusers folder, or `tiny:<name>`); the decoder, VQGAN
        and EffNet encoder from `part_models` ("decoder", "effnet_encoder"; blank = the family's
        hub defaults); `part_models["prior"]` replaces the prior network."""
        del config_dir  # the prior's configs always come with its diffusers folder
        loader = Loader(cache_dir, offline, token)
        parts = {k: str(v).strip() for k, v in dict(part_models or {}).items() if v and str(v).strip()}
        name = str(name or "").strip()
        if is_tiny(name):
            try:
                tiny = resolve_tiny(name)
            except ValueError as e:
                raise ModelLoadError(str(e)) from e
            root = tiny.diffusers_dir.parent
            name = str(tiny.diffusers_dir)
            parts.setdefault("decoder", str(root / "decoder"))
            parts.setdefault("effnet_encoder", str(cls.tiny_effnet_path(root)))
        source = resolve_source(name, "base_model_name", "prior", cls.hub_example)
        if "decoder" not in parts:
            parts["decoder"] = cls.default_decoder(source)
        if "effnet_encoder" not in parts:
            parts["effnet_encoder"] = cls.default_effnet(parts["decoder"], loader)
        model = cls._load_parts(source, parts, loader)
        for part, dtype in part_dtypes(dtypes, cls.part_names).items():
            getattr(model, part).to(dtype=dtype)
        return model

    @classmethod
    def default_decoder(cls, prior: Source) -> str:
        """The family's hub decoder (`decoder_default`) for a hub prior; a local prior must name its own."""
        if prior.local:
            raise ModelLoadError(
                f"decoder.model_name: a local {cls.family_name} prior needs its decoder too; give the decoder model "
                f"(e.g. {cls.decoder_examples})."
            )
        return cls.decoder_default

    @classmethod
    def default_effnet(cls, decoder: str, loader: Loader) -> str:
        raise NotImplementedError

    @classmethod
    def tiny_effnet_path(cls, root: Path) -> Path:
        raise NotImplementedError

    @classmethod
    def network_classes(cls) -> tuple[type, type, type, type]:
        """The classes of the text encoder, the prior, the decoder and the VQGAN."""
        raise NotImplementedError

    @classmethod
    def _load_prior(cls, source: Source, override: str | None, loader: Loader):
        """The prior network: from `override` (prior.model_name) when given, else from the base model."""
        prior_cls = cls.network_classes()[1]
        if override:
            prior_source = resolve_source(override, "prior.model_name", "prior", cls.prior_example)
            return loader.load(prior_cls, prior_source, prior_source.subfolder, "prior.model_name")
        return loader.load(prior_cls, source, source.subfolder, "base_model_name")

    @classmethod
    def _decoder_text_parts(cls, decoder_source: Source, loader: Loader) -> dict:
        """Keyword arguments of the decoder's own text encoder, where the decoder reads text ({}: none)."""
        return {}

    @classmethod
    def _load_parts(cls, source: Source, parts: Mapping[str, str], loader: Loader):
        """The tokenizer, text encoder, scheduler and prior of the base model (`source`), the
        decoder model's parts (`parts["decoder"]`) and the EffNet encoder, each load's errors
        naming its field."""
        from diffusers import DDPMWuerstchenScheduler
        from transformers import CLIPTokenizer

        text_encoder_cls, _, decoder_cls, vqgan_cls = cls.network_classes()
        prior_pipe_cls, decoder_pipe_cls = cls.pipeline_classes()
        field = "base_model_name"
        tokenizer = loader.load(CLIPTokenizer, source, "tokenizer", field)
        text_encoder = loader.load(text_encoder_cls, source, "text_encoder", field)
        scheduler = loader.load(DDPMWuerstchenScheduler, source, "scheduler", field)
        prior_config = loader.pipeline_config(prior_pipe_cls, source, field)
        prior = cls._load_prior(source, parts.get("prior"), loader)

        decoder_source = resolve_source(parts["decoder"], "decoder.model_name", "decoder", cls.decoder_default)
        field = "decoder.model_name"
        return cls(
            tokenizer=tokenizer,
            text_encoder=text_encoder,
            prior=prior,
            scheduler=scheduler,
            prior_pipeline_config={k: prior_config[k] for k in cls.prior_pipeline_keys if k in prior_config},
            decoder=loader.load(decoder_cls, decoder_source, decoder_source.subfolder, field),
            decoder_vqgan=loader.load(vqgan_cls, decoder_source, "vqgan", field),
            decoder_scheduler=loader.load(DDPMWuerstchenScheduler, decoder_source, "scheduler", field),
            decoder_pipeline_config={
                k: v for k, v in loader.pipeline_config(decoder_pipe_cls, decoder_source, field).items() if k in DECODER_PIPELINE_KEYS
            },
            **cls._decoder_text_parts(decoder_source, loader),
            effnet_encoder=load_effnet(parts["effnet_encoder"], loader),
        )

    # ------------------------------------------------------------ parts
    # (`parts` and `tokenizers` are Family's: the tokenizer is the prior's, where embeddings live)

    def to(self, device: torch.device | str):
        """Moves the parts a training step uses; the decoder parts join them only while sampling."""
        for part in self.training_parts:
            getattr(self, part).to(device)
        return self

    @property
    def prediction_type(self) -> str:
        return "epsilon"

    def configure_noise_schedule(self, *, prediction_type: str | None = None, zero_terminal_snr: bool = False) -> None:
        if zero_terminal_snr:  # (first: it also asks for v-prediction)
            raise ValueError(
                f"rescale_noise_scheduler_to_zero_terminal_snr: {self.model_type.value} uses a continuous cosine schedule "
                "that cannot be rescaled; turn it off"
            )
        if prediction_type not in (None, "epsilon"):
            raise ValueError(
                f"force_v_prediction: {self.model_type.value} priors predict noise (epsilon) only; turn force_v_prediction off"
            )

    def set_attention(self, mechanism, device: torch.device | str | None = None) -> None:
        set_prior_attention(base_module(self.prior), mechanism, device)

    # ------------------------------------------------------------ text

    def tokenize(self, prompts: str | Sequence[str]):
        if isinstance(prompts, str):
            prompts = [prompts]
        return self.tokenizer(
            list(prompts), padding="max_length", max_length=self.tokenizer.model_max_length, truncation=True, return_tensors="pt"
        )

    def encode_text(self, captions: Sequence[str], grad: frozenset[str] | set[str] = frozenset()) -> dict[str, torch.Tensor]:
        tokens = self.tokenize(list(captions))
        device = module_device(self.text_encoder)
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            out = self.text_encoder(
                tokens.input_ids.to(device), attention_mask=tokens.attention_mask.to(device), output_hidden_states=True
            )
            conditioning = self._conditioning(out, self.layer_skips.get("text_encoder", 0))
            key = self.prompt_key
            conditioning[key] = self.output_embedded("text_encoder", tokens.input_ids, conditioning[key])
            return conditioning

    def _conditioning(self, text_encoder_output, layer_skip: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # ------------------------------------------------------------ latents

    @property
    def vae_id(self) -> str:
        """The latent cache's key for the image encoder: its config, weights and their type (read
        when asked, so the type it encodes in), and the family's latent scaling."""
        return "effnet-" + weights_fingerprint(self.effnet_encoder, f"{self.model_type.value}-{EFFNET_IMAGE_SCALE}")

    def scale_latents(self, features: torch.Tensor) -> torch.Tensor:
        return features

    def unscale_latents(self, latents: torch.Tensor) -> torch.Tensor:
        return latents

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """The prior's latent image for pixels in [-1, 1] (B, 3, H, W): scaled to 3/4, ImageNet-normalised
        and encoded by the EffNet encoder (deterministic, so `sample` and `generator` change nothing)."""
        del sample, generator
        effnet = self.effnet_encoder.eval()
        device, dtype = module_device(effnet), module_dtype(effnet)
        x = (pixels.to(device, torch.float32) + 1.0) / 2.0
        h, w = x.shape[-2:]
        x = F.interpolate(x, size=(int(h * EFFNET_IMAGE_SCALE), int(w * EFFNET_IMAGE_SCALE)), mode="bilinear",
                          align_corners=False, antialias=True)
        mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
        features = effnet(((x - mean) / std).to(dtype)).float()
        return self.scale_latents(features)

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor, prompt: str = "", steps: int | None = None, seed: int = 0) -> torch.Tensor:
        """Pixels in [-1, 1] for prior latents: the decoder (stage B) diffuses them into VQGAN
        latents, which the VQGAN decodes. Not exact like a VAE: stage B is a diffusion model."""
        generator = torch.Generator(device="cpu").manual_seed(int(seed))
        with self._sampling_parts(module_device(self.prior)), denoiser_in_its_dtype(self.decoder):
            images = self._decoder_pipeline()(
                image_embeddings=self.unscale_latents(latents.float()).to(module_device(self.decoder), module_dtype(self.decoder)),
                prompt=[prompt] * latents.shape[0],
                num_inference_steps=int(steps or self.decoder_steps),
                guidance_scale=0.0,
                generator=generator,
                output_type="pt",
            ).images
        return images.float() * 2.0 - 1.0

    def add_noise(self, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        return self.noise_scheduler.add_noise(latents, noise, timesteps)

    def prediction_target(self, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        return noise

    def predict(self, noisy_latents: torch.Tensor, timesteps: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        device, dtype = module_device(self.prior), module_dtype(self.prior)
        ratio = self.noise_scheduler.ratio(timesteps.to(device)).to(dtype)
        cond = {k: v.to(device, dtype) for k, v in conditioning.items()}
        return self._prior_forward(noisy_latents.to(device, dtype), ratio, cond)

    def _prior_forward(self, noisy: torch.Tensor, ratio: torch.Tensor, conditioning: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------ sampling

    @classmethod
    def pipeline_classes(cls) -> tuple[type, type]:
        """The family's diffusers (prior pipeline, decoder pipeline) classes."""
        raise NotImplementedError

    def _prior_pipeline(self):
        from diffusers import DDPMWuerstchenScheduler

        pipe = self.pipeline_classes()[0](
            tokenizer=self.tokenizer,
            text_encoder=base_module(self.text_encoder),
            prior=base_module(self.prior),
            scheduler=DDPMWuerstchenScheduler.from_config(self.scheduler.config),
            **self.prior_pipeline_config,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def _decoder_pipeline(self):
        """Stage B and the VQGAN; the decoder reads the prompt with its own text encoder
        (Würstchen 2) or the prior's (Stable Cascade)."""
        from diffusers import DDPMWuerstchenScheduler

        own_text = self.decoder_text_encoder is not None
        pipe = self.pipeline_classes()[1](
            decoder=self.decoder,
            tokenizer=self.decoder_tokenizer if own_text else self.tokenizer,
            text_encoder=self.decoder_text_encoder if own_text else base_module(self.text_encoder),
            scheduler=DDPMWuerstchenScheduler.from_config(self.decoder_scheduler.config),
            vqgan=self.decoder_vqgan,
            **self.decoder_pipeline_config,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def _prior_call_kwargs(self, cond: dict[str, torch.Tensor], uncond: dict[str, torch.Tensor] | None) -> dict:
        raise NotImplementedError

    class _Parked:
        def __init__(self, model, device):
            self.model, self.device = model, torch.device(device)

        def __enter__(self):
            modules = self.model.parts
            self.state = {n: (m.training, module_device(m)) for n, m in modules.items()}
            for m in modules.values():
                m.eval()
                m.to(self.device)

        def __exit__(self, *exc):
            for name, m in self.model.parts.items():
                training, device = self.state[name]
                m.to(device)
                m.train(training)

    def _sampling_parts(self, device) -> _Parked:
        """Every part on `device` in eval mode, each back where it was afterwards."""
        return self._Parked(self, device)

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, steps: int = 20,
               cfg_scale: float = 4.0, seed: int = 0, sampler: NoiseScheduler | str | None = None,
               device: torch.device | str | None = None):
        """One image (PIL) of exactly `width` x `height`: the prior (with `steps` and classifier-free
        guidance `cfg_scale`, the prompt encoded as in training, clip skip included), then the
        decoder (at most `decoder_steps` steps, no guidance) and the VQGAN.

        The families sample with their own DDPMWuerstchenScheduler; `sampler` does not apply."""
        del sampler
        target = torch.device(device) if device is not None else module_device(self.prior)
        generator = torch.Generator(device="cpu").manual_seed(int(seed))
        with self._sampling_parts(target), torch.no_grad():
            cond = self.encode_text([prompt])
            uncond = self.encode_text([negative_prompt or ""]) if cfg_scale > 1 else None
            embeddings = self._prior_pipeline()(
                height=int(height), width=int(width), num_inference_steps=int(steps), guidance_scale=float(cfg_scale),
                generator=generator, output_type="pt", **self._prior_call_kwargs(cond, uncond),
            ).image_embeddings
            with denoiser_in_its_dtype(self.decoder):
                image = self._decoder_pipeline()(
                    image_embeddings=embeddings.to(target, module_dtype(self.decoder)),
                    prompt=prompt,
                    num_inference_steps=min(int(steps), self.decoder_steps),
                    guidance_scale=0.0,
                    generator=generator,
                    output_type="pil",
                ).images[0]
        if image.size != (int(width), int(height)):
            image = image.resize((int(width), int(height)))
        return image

    # ------------------------------------------------------------ saving

    def save_diffusers(self, directory: str | os.PathLike, dtype: DataType | torch.dtype | None) -> Path:
        """The prior model as a diffusers folder (tokenizer, text_encoder, prior, scheduler and
        model_index.json), the layout the base model came in; written atomically."""

        def write_rest(tmp: Path) -> None:
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.scheduler.save_pretrained(tmp / "scheduler")
            self._prior_pipeline().save_config(tmp)

        return save_diffusers_folder(directory, {"prior": self.prior, "text_encoder": self.text_encoder}, dtype, write_rest)
