"""Parts of the family interface that several families share, as small mixins a family class
lists among its bases (models/family.Family is the root): loading guards, the KL VAE's latents,
the DDPM noise schedule and its targets. Stable Diffusion (sd15.py) is the reference; PixArt uses
all three, the flow-matching families (flow_family.py) the first two.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from ot_gradio.models.common import ModelLoadError, gated_message, gated_repo, module_device, module_dtype, weights_fingerprint
from ot_gradio.models.weight_variants import variant_keywords


@contextlib.contextmanager
def sentencepiece_files_readable() -> Iterator[None]:
    """While loading a model: tokenizer folders that hold only a SentencePiece model file (the
    hub's PixArt-α/Σ and Chroma1-HD T5 tokenizers: spiece.model, no tokenizer.json) load without
    the sentencepiece package. transformers converts such a file to its own tokenizer from the
    file's protobuf alone, but asks for the package first; the file is read here with protobuf
    (which transformers uses for it too), so the conversion is transformers' own."""
    if importlib.util.find_spec("sentencepiece") is not None:
        yield
        return
    convert = importlib.import_module("transformers.convert_slow_tokenizer")  # the package exports a function of that name

    library_reader = convert.SentencePieceExtractor

    class ProtobufReader(library_reader):
        def __init__(self, model: str):
            proto = convert.import_protobuf().ModelProto()
            with open(model, "rb") as file:
                proto.ParseFromString(file.read())
            self.proto = proto

    convert.SentencePieceExtractor = ProtobufReader
    try:
        yield
    finally:
        convert.SentencePieceExtractor = library_reader


class HubLoading:
    """Errors of diffusers' loaders as ModelLoadErrors that say what to do."""

    default_config_repo: str  # the hub repo whose component configs a single file is read with
    pipeline_class_name: str  # the diffusers pipeline class that loads and samples the family
    folder_index = "model_index.json"  # what marks a diffusers folder of the family (a modular pipeline's: modular_model_index.json)

    @classmethod
    def _pipeline_class(cls):
        """The diffusers pipeline class named by `pipeline_class_name`."""
        import diffusers

        return getattr(diffusers, cls.pipeline_class_name)

    @staticmethod
    def _guarded(name: str, load, hint: str):
        """`load()`, with any loader's exception turned into a ModelLoadError carrying `hint`."""
        try:
            return load()
        except ModelLoadError:
            raise
        except Exception as e:  # diffusers, transformers and the hub raise many kinds
            repo = gated_repo(e)
            if repo is not None:  # the commonest first-run failure of Flux.1-dev and SD 3: its own words
                raise ModelLoadError(f"Could not load base model '{name}': {gated_message(repo)}.") from e
            detail = str(e).strip().rstrip(".")
            raise ModelLoadError(f"Could not load base model '{name}'. {hint} (Details: {detail}.)") from e

    @classmethod
    def _tiny_or_folder(cls, name: str, load, label: str, parts: str, alternative: str = ""):
        """`load(folder, keywords)` for a `tiny:` name (built on first use) or a local diffusers
        folder; None when `name` is neither (a file or a hub id, which the family loads its own
        way). `keywords`: from_pretrained's `variant` where the folder's parts hold only variant
        weights (models/weight_variants.py), else none. A folder without model_index.json, or
        whose parts fail to load, says what to pick instead."""
        from ot_gradio.models.tiny import is_tiny, resolve_tiny

        if is_tiny(name):
            try:
                folder = resolve_tiny(name).diffusers_dir
            except ValueError as e:
                raise ModelLoadError(str(e)) from e
            return load(folder, {})
        path = Path(name).expanduser()
        if not path.is_dir():
            return None
        if not (path / cls.folder_index).is_file():
            raise ModelLoadError(
                f"The folder '{name}' is not a diffusers model (it has no {cls.folder_index}). "
                f"Pick the folder that holds {cls.folder_index}{alternative}."
            )
        keywords = variant_keywords(path)
        return cls._guarded(
            name,
            lambda: load(path, keywords),
            f"The folder looks like a diffusers model but a part failed to load; check that it is a complete {label} model "
            f"({parts}).",
        )

    @staticmethod
    def _text_only_tokenizers(source: str | Path, hub: Mapping) -> dict:
        """The tokenizer of each tokenizer part that the model's model_index.json lists as a
        transformers processor (Flux.2 dev ships a PixtralProcessor), loaded without the
        processor's image side: the pipelines only tokenize text with it, and transformers'
        image processors need torchvision, which this install does not have. `hub`: the
        loading keywords (cache_dir, token, local_files_only)."""
        from diffusers import DiffusionPipeline
        from transformers import AutoTokenizer

        index = DiffusionPipeline.load_config(str(source), **hub)
        return {
            part: AutoTokenizer.from_pretrained(str(source), subfolder=part, **hub)
            for part, entry in index.items()
            if part.startswith("tokenizer") and isinstance(entry, (list, tuple)) and len(entry) == 2
            and entry[0] == "transformers" and str(entry[1]).endswith("Processor")
        }

    @classmethod
    def _single_file_config(cls, config_dir: str | None, *, cache_dir: str | None, offline: bool, model: str) -> str:
        """Where a single file's component configs come from: `config_dir`, which must be a
        diffusers folder (of `model`, the message says), else the default config repo or, offline,
        its cached snapshot."""
        if config_dir and not (Path(config_dir).expanduser() / cls.folder_index).is_file():
            raise ModelLoadError(
                f"The config folder '{config_dir}' is not a diffusers model (no {cls.folder_index}); "
                f"point it to a diffusers folder of {model}."
            )
        if config_dir:
            return str(Path(config_dir).expanduser())
        if offline:
            return cls._cached_config_repo(cache_dir)
        return cls.default_config_repo

    @classmethod
    def _cached_config_repo(cls, cache_dir: str | None) -> str:
        """The cached snapshot of the default config repo, found without touching the network
        (diffusers would try to download it even with local_files_only)."""
        from huggingface_hub import snapshot_download

        try:
            return snapshot_download(cls.default_config_repo, cache_dir=cache_dir, local_files_only=True)
        except Exception as e:
            raise ModelLoadError(
                f"A single file needs the component configs of a diffusers model, and offline mode is on "
                f"but '{cls.default_config_repo}' is not in the local Hugging Face cache. Give a local "
                "diffusers folder of the same model type as the config folder, or turn offline mode off once."
            ) from e


class CheckedLayerSkips:
    """`layer_skips` (text encoder part -> layers skipped), each checked by `_check_layer_skip`
    when set, so a skip the encoder has no layer for fails before training."""

    @property
    def layer_skips(self) -> dict[str, int]:
        """Layer skip per text encoder part, set by the trainer (training and sampling use it)."""
        return self._layer_skips

    @layer_skips.setter
    def layer_skips(self, skips: Mapping[str, int]) -> None:
        checked = {}
        for part, skip in dict(skips).items():
            checked[part] = int(skip or 0)
            self._check_layer_skip(part, checked[part])
        self._layer_skips = checked

    def _check_layer_skip(self, part: str, skip: int) -> None:
        """A ValueError naming the `<part>_layer_skip` field where `skip` is out of range."""
        raise NotImplementedError


class KlVaeLatents:
    """A KL VAE (`self.vae`) whose latents are `(z - shift_factor) * scaling_factor`."""

    vae: torch.nn.Module

    @property
    def vae_id(self) -> str:
        """Identity of the VAE for the latent cache: its config and a fingerprint of its weights
        and their type, so a different VAE (or other weights under the same name, or the same in
        another type) never reuses latents. Read when asked, so it is the type the VAE encodes in:
        the latents are made outside autocast (the caching phase, and a step before its autocast)."""
        return "sd-vae-" + weights_fingerprint(self.vae)

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent along each side (8 for SD)."""
        return 2 ** (len(self.vae.config.block_out_channels) - 1)

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Latents for pixels in [-1, 1] (B, 3, H, W), shifted and scaled as the VAE's config says.

        Draws a sample from the VAE's latent distribution by default, as OneTrainer does (a
        little noise that acts as augmentation); `sample=False` takes its mean (deterministic).
        """
        dist = self.vae.encode(pixels.to(module_device(self.vae), module_dtype(self.vae))).latent_dist
        latents = dist.sample(generator) if sample else dist.mean
        shift = getattr(self.vae.config, "shift_factor", None) or 0.0
        return (latents - shift) * self.vae.config.scaling_factor

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] for scaled latents (the inverse of `encode_images`), in the VAE's dtype."""
        shift = getattr(self.vae.config, "shift_factor", None) or 0.0
        latents = latents / self.vae.config.scaling_factor + shift
        return self.vae.decode(latents.to(module_device(self.vae), module_dtype(self.vae))).sample



class Flux2VaeLatents(KlVaeLatents):
    """AutoencoderKLFlux2's latents as Flux.2, ERNIE-Image and Ideogram 4 train on them: the 32-channel latents
    cut into 2x2 patches (128 channels at 1/16 of the image side) and normalised by the VAE's
    batch-norm statistics. `bn_eps`: the epsilon of that normalisation (None: the VAE config's;
    ErnieImagePipeline decodes with 1e-5 whatever the config says)."""

    bn_eps: float | None = None

    def _bn_stats(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        bn = self.vae.bn
        eps = self.vae.config.batch_norm_eps if self.bn_eps is None else self.bn_eps
        mean = bn.running_mean.view(1, -1, 1, 1).to(like.device, like.dtype)
        return mean, torch.sqrt(bn.running_var.view(1, -1, 1, 1) + eps).to(like.device, like.dtype)

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Patchified, normalised latents (B, 128, H/16, W/16) for pixels in [-1, 1]; a sample of
        the latent distribution by default (OneTrainer's), its mean with sample=False."""
        dist = self.vae.encode(pixels.to(module_device(self.vae), module_dtype(self.vae))).latent_dist
        latents = self.patchify(dist.sample(generator) if sample else dist.mean)
        mean, std = self._bn_stats(latents)
        return (latents - mean) / std

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] for latents of `encode_images`."""
        latents = latents.to(module_device(self.vae), module_dtype(self.vae))
        mean, std = self._bn_stats(latents)
        return self.vae.decode(self.unpatchify(latents * std + mean)).sample

    @staticmethod
    def patchify(latents: torch.Tensor) -> torch.Tensor:
        """(B, 32, H, W) -> (B, 128, H/2, W/2), in Flux2Pipeline's channel order (channel, patch row, patch column)."""
        from diffusers import Flux2Pipeline

        return Flux2Pipeline._patchify_latents(latents)

    @staticmethod
    def unpatchify(latents: torch.Tensor) -> torch.Tensor:
        from diffusers import Flux2Pipeline

        return Flux2Pipeline._unpatchify_latents(latents)


class DdpmNoise:
    """A DDPM noise schedule: `self.scheduler` (the sampling scheduler) and `self.noise_scheduler`
    (the DDPMScheduler training adds noise with), with `self.schedule_overrides` saved with the model."""

    scheduler: object
    noise_scheduler: object
    schedule_overrides: dict

    def _use_scheduler(self, scheduler) -> None:
        """The scheduler the model ships with (samplers are built from its config), the
        DDPMScheduler training adds noise with, and no changes to the schedule made for training
        yet (v-prediction, zero terminal SNR; samplers get them too)."""
        from diffusers import DDPMScheduler

        self.scheduler = scheduler
        self.noise_scheduler = DDPMScheduler.from_config(scheduler.config)
        self.schedule_overrides = {}

    @property
    def prediction_type(self) -> str:
        return self.noise_scheduler.config.prediction_type

    def configure_noise_schedule(self, *, prediction_type: str | None = None, zero_terminal_snr: bool = False) -> None:
        """Train and sample with another prediction type ('epsilon', 'v_prediction') and/or the
        noise schedule rescaled to zero terminal SNR (Lin et al. 2023, with 'trailing' timestep
        spacing for sampling, as the paper advises). The saved model's scheduler config carries
        the prediction type."""
        from diffusers import DDPMScheduler

        overrides = {}
        if prediction_type:
            overrides["prediction_type"] = prediction_type
        if zero_terminal_snr:
            overrides.update(rescale_betas_zero_snr=True, timestep_spacing="trailing")
        if not overrides:
            return
        self.schedule_overrides.update(overrides)
        if prediction_type:
            self.scheduler = type(self.scheduler).from_config(self.scheduler.config, prediction_type=prediction_type)
        self.noise_scheduler = DDPMScheduler.from_config(self.scheduler.config, **self.schedule_overrides)

    def add_noise(self, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        return self.noise_scheduler.add_noise(latents, noise, timesteps)

    def prediction_target(self, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        """What the denoiser should output for these inputs, per the scheduler's prediction type."""
        kind = self.prediction_type
        if kind == "epsilon":
            return noise
        if kind == "v_prediction":
            return self.noise_scheduler.get_velocity(latents, noise, timesteps)
        if kind == "sample":
            return latents
        raise ValueError(f"Unknown prediction type '{kind}' in the model's scheduler config.")
