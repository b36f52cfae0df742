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

Where the parts come from: the base model is the prior (tokenizer, text encoder, prior,
scheduler); `decoder.model_name` is the decoder model (stage B and the VQGAN, and Würstchen's
decoder text encoder); `effnet_encoder.model_name` the EffNet weights; `prior.model_name`
replaces the prior network only. Blank ones default to the hub models of the family.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ot_gradio.config.enums import DataType, NoiseScheduler
from ot_gradio.fsutil import atomic_write_dir
from ot_gradio.models.common import ModelLoadError, cast_state_dict, torch_dtype
from ot_gradio.models.effnet import EfficientNetEncoder, load_effnet_state_dict
from ot_gradio.models.tiny import is_tiny, resolve_tiny

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
EFFNET_IMAGE_SCALE = 0.75
NUM_TRAIN_TIMESTEPS = 1000
SCHEDULE_S = 0.008
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(/[\w.-]+)?")


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


# ------------------------------------------------------------------ small helpers


def module_dtype(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


def module_device(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device


def base_module(module: torch.nn.Module) -> torch.nn.Module:
    return module.get_base_model() if hasattr(module, "get_base_model") else module


def plain_state_dict(module: torch.nn.Module, name: str) -> dict[str, torch.Tensor]:
    state_dict = base_module(module).state_dict()
    if any(".base_layer." in k or ".lora_" in k for k in state_dict):
        raise ValueError(f"The {name} still has LoRA layers in it; merge or remove them before saving the full model.")
    return state_dict


def weights_fingerprint(module: torch.nn.Module, extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    config = getattr(module, "config", None)
    if config is not None:
        h.update(json.dumps(dict(config), sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, tensor in sorted(base_module(module).state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().flatten()[:256].float().cpu().numpy().tobytes())
    return h.hexdigest()[:20]


def _is_local(name: str) -> bool:
    return (
        Path(name).expanduser().exists()
        or name.startswith(("/", ".", "~", "\\"))
        or re.match(r"^[A-Za-z]:[\\/]", name) is not None
        or name.lower().endswith((".safetensors", ".ckpt", ".bin"))
    )


class Source:
    """Where one model comes from: a local folder or a hub repo, and the subfolder of the part.

    `owner/repo/sub` (hub) and a component folder inside a diffusers model (its parent has
    model_index.json) both name the subfolder explicitly, e.g. Stable Cascade's `prior_lite`."""

    def __init__(self, root: str, subfolder: str | None, local: bool):
        self.root, self.subfolder, self.local = root, subfolder, local

    def __repr__(self) -> str:
        return f"{self.root}" + (f" ({self.subfolder})" if self.subfolder else "")


def resolve_source(name: str, field: str, default_subfolder: str, example: str) -> Source:
    name = str(name or "").strip()
    if not name:
        raise ModelLoadError(f"{field}: no model given. Enter a Hugging Face id like '{example}' or a local diffusers folder.")
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "model_index.json").is_file():
            return Source(str(path), default_subfolder, True)
        if (path / "config.json").is_file() and (path.parent / "model_index.json").is_file():
            return Source(str(path.parent), path.name, True)
        raise ModelLoadError(
            f"{field}: the folder '{name}' is not a diffusers model (no model_index.json). "
            "Pick the folder that holds model_index.json."
        )
    if _is_local(name) or not _HUB_ID.fullmatch(name):
        raise ModelLoadError(f"{field}: '{name}' was not found (no such folder). Check the path, or give a hub id like '{example}'.")
    owner, repo, *sub = name.split("/")
    return Source(f"{owner}/{repo}", sub[0] if sub else default_subfolder, False)


class Loader:
    """from_pretrained with the run's hub settings, turning failures into messages that name the field."""

    def __init__(self, cache_dir: str | None, offline: bool, token: str | None):
        self.cache_dir, self.offline, self.token = cache_dir, offline, token

    def hint(self, source: Source) -> str:
        if source.local:
            return "check that the folder is a complete model of this family"
        if self.offline:
            return ("offline mode is on and it is not in the local Hugging Face cache"
                    + (f" ({self.cache_dir})" if self.cache_dir else "") + "; turn offline mode off to download it once")
        return "check the id, your network and, for gated models, the access token"

    def load(self, cls, source: Source, subfolder: str | None, field: str, **kwargs):
        try:
            return cls.from_pretrained(
                source.root,
                subfolder=subfolder,
                cache_dir=self.cache_dir,
                token=self.token,
                local_files_only=self.offline or source.local,
                **kwargs,
            )
        except Exception as e:  # diffusers, transformers and the hub raise many kinds
            where = f"{source.root}" + (f"/{subfolder}" if subfolder else "")
            detail = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else type(e).__name__
            raise ModelLoadError(f"{field}: could not load {cls.__name__} from '{where}': {self.hint(source)} (Details: {detail}.)") from e

    def pipeline_config(self, pipeline_cls, source: Source, field: str) -> dict:
        try:
            return dict(pipeline_cls.load_config(
                source.root, cache_dir=self.cache_dir, token=self.token, local_files_only=self.offline or source.local
            ))
        except Exception as e:
            raise ModelLoadError(f"{field}: '{source.root}' has no readable model_index.json: {self.hint(source)} ({e}).") from e

    def hub_file(self, repo: str, filename: str, field: str) -> str:
        from huggingface_hub import hf_hub_download

        try:
            return hf_hub_download(repo, filename, cache_dir=self.cache_dir, token=self.token, local_files_only=self.offline)
        except Exception as e:
            raise ModelLoadError(
                f"{field}: could not get {filename} from '{repo}': {self.hint(Source(repo, None, False))}; "
                "or download it yourself and give its path."
            ) from e


# ------------------------------------------------------------------ the EffNet encoder


def _infer_effnet_config(state_dict: Mapping[str, torch.Tensor]) -> dict:
    """Widths and depths of an EfficientNetV2-S-shaped encoder from its weights (the published
    full-size files and tiny test ones alike)."""
    widths = [int(state_dict["backbone.0.0.weight"].shape[0])]
    depths = []
    for stage in range(1, 7):
        blocks = {int(k.split(".")[2]) for k in state_dict if k.startswith(f"backbone.{stage}.")}
        if not blocks:
            raise KeyError(f"backbone.{stage}")
        depths.append(len(blocks))
        layers = [int(k.split(".")[4]) for k in state_dict if re.match(rf"backbone\.{stage}\.0\.block\.\d+\.0\.weight$", k)]
        widths.append(int(state_dict[f"backbone.{stage}.0.block.{max(layers)}.0.weight"].shape[0]))
    return {
        "c_latent": int(state_dict["mapper.0.weight"].shape[0]),
        "c_cond": int(state_dict["mapper.0.weight"].shape[1]),
        "affine_batch_norm": "mapper.1.weight" in state_dict,
        "widths": widths,
        "depths": depths,
    }


def load_effnet_file(path: str | os.PathLike, field: str = "effnet_encoder.model_name") -> EfficientNetEncoder:
    """An EffNet encoder from one .safetensors file (Stable Cascade's `effnet_encoder.safetensors`)."""
    from safetensors.torch import load_file

    try:
        state_dict = load_file(str(path))
        config = _infer_effnet_config(state_dict)
    except KeyError as e:
        raise ModelLoadError(f"{field}: {path} is not an EfficientNet encoder file (no {e} weights).") from e
    except Exception as e:
        raise ModelLoadError(f"{field}: could not read {path} ({e}).") from e
    if config["widths"] == [24, 24, 48, 64, 128, 160, 256]:
        config.update(widths=None, depths=None)  # the real V2-S
    encoder = EfficientNetEncoder(**config)
    try:
        load_effnet_state_dict(encoder, state_dict, str(path))
    except ValueError as e:
        raise ModelLoadError(str(e)) from e
    return encoder.eval()


def load_effnet(name: str, loader: Loader, field: str = "effnet_encoder.model_name") -> EfficientNetEncoder:
    """A local .safetensors file, or a folder / hub repo in the diffusers layout (config.json and
    weights, as `warp-ai/EfficientNetEncoder`)."""
    path = Path(name).expanduser()
    if path.is_file():
        return load_effnet_file(path, field)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{field}: the folder '{name}' has no config.json; give the EffNet folder or its .safetensors file.")
        return loader.load(EfficientNetEncoder, Source(str(path), None, True), None, field).eval()
    if _is_local(name) or not _HUB_ID.fullmatch(name):
        raise ModelLoadError(f"{field}: '{name}' was not found; give the EffNet encoder's .safetensors file, folder or hub id.")
    return loader.load(EfficientNetEncoder, Source(name, None, False), None, field).eval()


# ------------------------------------------------------------------ attention


def set_prior_attention(prior: torch.nn.Module, mechanism, device: torch.device | str | None) -> None:
    """DEFAULT, SDP, XFORMERS or FLASH for every attention layer of the prior (as OneTrainer)."""
    from diffusers.models.attention_processor import Attention, AttnProcessor, AttnProcessor2_0, XFormersAttnProcessor

    mechanism = str(getattr(mechanism, "value", mechanism)).upper()
    on_cuda = torch.device(device).type == "cuda" if device is not None else module_device(prior).type == "cuda"
    if mechanism == "DEFAULT":
        make = AttnProcessor
    elif mechanism == "SDP":
        make = AttnProcessor2_0
    elif mechanism == "XFORMERS":
        import importlib.util

        if importlib.util.find_spec("xformers") is None or not on_cuda:
            raise ValueError("attention_mechanism: XFORMERS needs the xformers package and a CUDA GPU; use SDP")
        make = XFormersAttnProcessor
    elif mechanism == "FLASH":
        if not on_cuda:
            raise ValueError("attention_mechanism: FLASH needs a CUDA GPU; use SDP (it picks flash attention itself where it can)")

        class FlashAttnProcessor(AttnProcessor2_0):
            def __call__(self, *args, **kwargs):
                from torch.nn.attention import SDPBackend, sdpa_kernel

                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return super().__call__(*args, **kwargs)

        make = FlashAttnProcessor
    else:
        raise ValueError(f"attention_mechanism: unknown value {mechanism!r}; use SDP, DEFAULT, XFORMERS or FLASH")
    for module in prior.modules():
        if isinstance(module, Attention):
            module.set_processor(make())


# ------------------------------------------------------------------ the family


class CascadeFamily:
    """The family interface (models/base.py) for a prior trained on EffNet latents; subclasses
    give the networks, the text conditioning and the latent scaling."""

    native_resolution = 1024
    denoiser = "prior"
    text_encoder_names = ("text_encoder",)
    parts_order: tuple[str, ...] = ()
    # parts used in every training step; the decoder parts stay on the CPU until sampling
    training_parts = ("prior", "text_encoder", "effnet_encoder")
    lora_base_model_version = ""
    lora_layer_presets: dict[str, dict[str, list[str]]] = {}
    timestep_scale = 1.0
    timestep_offset = 0.001
    decoder_steps = 10
    hub_example = ""

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
        dtypes = dict(dtypes or {})
        unknown = set(dtypes) - set(cls.parts_order)
        if unknown:
            raise ValueError(f"Unknown model part(s) {sorted(unknown)} in dtypes; expected {', '.join(cls.parts_order)}.")
        for part in cls.parts_order:
            getattr(model, part).to(dtype=torch_dtype(dtypes.get(part)))
        return model

    @classmethod
    def default_decoder(cls, prior: Source) -> str:
        raise NotImplementedError

    @classmethod
    def default_effnet(cls, decoder: str, loader: Loader) -> str:
        raise NotImplementedError

    @classmethod
    def tiny_effnet_path(cls, root: Path) -> Path:
        raise NotImplementedError

    @classmethod
    def _load_parts(cls, source: Source, parts: Mapping[str, str], loader: Loader):
        raise NotImplementedError

    # ------------------------------------------------------------ parts

    @property
    def parts(self) -> dict[str, torch.nn.Module]:
        return {part: getattr(self, part) for part in self.parts_order}

    def to(self, device: torch.device | str):
        """Moves the parts a training step uses; the decoder parts join them only while sampling."""
        for part in self.training_parts:
            getattr(self, part).to(device)
        return self

    @property
    def prediction_type(self) -> str:
        return "epsilon"

    def configure_noise_schedule(self, *, prediction_type: str | None = None, zero_terminal_snr: bool = False) -> None:
        if prediction_type not in (None, "epsilon"):
            raise ValueError(
                f"force_v_prediction: {self.model_type.value} priors predict noise (epsilon) only; turn force_v_prediction off"
            )
        if zero_terminal_snr:
            raise ValueError(
                f"rescale_noise_scheduler_to_zero_terminal_snr: {self.model_type.value} uses a continuous cosine schedule "
                "that cannot be rescaled; turn it off"
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
            return self._conditioning(out, self.layer_skips.get("text_encoder", 0))

    def _conditioning(self, text_encoder_output, layer_skip: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # ------------------------------------------------------------ latents

    @property
    def vae_id(self) -> str:
        """The latent cache's key for the image encoder: its config and weights, and the family's latent scaling."""
        if getattr(self, "_vae_id", None) is None:
            self._vae_id = "effnet-" + weights_fingerprint(self.effnet_encoder, f"{self.model_type.value}-{EFFNET_IMAGE_SCALE}")
        return self._vae_id

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
        with self._sampling_parts(module_device(self.prior)):
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

    def _prior_pipeline(self):
        raise NotImplementedError

    def _decoder_pipeline(self):
        raise NotImplementedError

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
        from safetensors.torch import save_file

        dt = torch_dtype(dtype)
        state = {
            "prior": cast_state_dict(plain_state_dict(self.prior, "prior"), dt),
            "text_encoder": cast_state_dict(plain_state_dict(self.text_encoder, "text_encoder"), dt),
        }

        def write(tmp: Path) -> None:
            (tmp / "prior").mkdir()
            base_module(self.prior).save_config(tmp / "prior")
            save_file(state["prior"], str(tmp / "prior" / "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})
            text_encoder = base_module(self.text_encoder)
            config = copy.deepcopy(text_encoder.config)
            config.dtype = str(dt).removeprefix("torch.")
            config.save_pretrained(tmp / "text_encoder")
            save_file(state["text_encoder"], str(tmp / "text_encoder" / "model.safetensors"), metadata={"format": "pt"})
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.scheduler.save_pretrained(tmp / "scheduler")
            self._prior_pipeline().save_config(tmp)

        return atomic_write_dir(directory, write)
