"""Stable Diffusion 1.5: load, encode, predict, sample, save.

The trainer talks to a loaded `StableDiffusion15` only through these methods and the component
attributes, so it never needs to know which family it trains.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType, NoiseScheduler
from ot_gradio.models.attention import set_classic_attention
from ot_gradio.models.common import (
    HUB_ID,
    SINGLE_FILE_SUFFIXES,
    ModelLoadError,
    base_module,
    input_dtype,
    module_device,
    part_dtypes,
    save_diffusers_folder,
)
from ot_gradio.models.family import Family
from ot_gradio.models.family_parts import DdpmNoise, HubLoading, KlVaeLatents
from ot_gradio.models.key_layout import save_tensors
from ot_gradio.models.ldm_config import ldm_config, sidecar_path, write_ldm_config
from ot_gradio.models.long_captions import joined, window_ids
from ot_gradio.models.registry import register_family
from ot_gradio.models.sampling_parts import exact_size, generation_size, parked_for_sampling
from ot_gradio.models.schedule_markers import file_scheduler, schedule_buffers
from ot_gradio.models.sd_single_file import is_open_clip, to_original_state_dict
from ot_gradio.models.vae_override import apply_vae_override
from ot_gradio.models.weight_variants import hub_variant

# Samples of a zero-terminal-SNR run: classifier-free guidance rescaled by this factor (Lin et al.
# 2023, section 3.4; OneTrainer's cfg_rescale for such runs), else the images come out overexposed.
ZERO_SNR_GUIDANCE_RESCALE = 0.7

# sampler -> (diffusers scheduler class name, overrides of the model's scheduler config)
SAMPLERS: dict[NoiseScheduler, tuple[str, dict]] = {
    NoiseScheduler.DDIM: ("DDIMScheduler", {"clip_sample": False}),
    NoiseScheduler.EULER: ("EulerDiscreteScheduler", {"use_karras_sigmas": False}),
    NoiseScheduler.EULER_A: ("EulerAncestralDiscreteScheduler", {}),
    NoiseScheduler.DPMPP: ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++", "use_karras_sigmas": False}),
    NoiseScheduler.DPMPP_SDE: ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++", "use_karras_sigmas": False}),
    NoiseScheduler.UNIPC: ("UniPCMultistepScheduler", {"use_karras_sigmas": False}),
    NoiseScheduler.EULER_KARRAS: ("EulerDiscreteScheduler", {"use_karras_sigmas": True}),
    NoiseScheduler.DPMPP_KARRAS: ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++", "use_karras_sigmas": True}),
    NoiseScheduler.DPMPP_SDE_KARRAS: ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++", "use_karras_sigmas": True}),
    NoiseScheduler.UNIPC_KARRAS: ("UniPCMultistepScheduler", {"use_karras_sigmas": True}),
}


def save_sd_single_file(path: str | os.PathLike, unet: torch.nn.Module, vae: torch.nn.Module, text_encoder: torch.nn.Module,
                        dtype: DataType | torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                        schedule: Mapping[str, torch.Tensor] | None = None, config: Mapping | None = None) -> Path:
    """An original-layout SD 1.x/2.x `.safetensors` checkpoint, atomically, with the noise-schedule
    buffers `schedule` beside the weights (not cast to `dtype`), then the LDM `config` as the
    `<stem>.yaml` beside it (models/ldm_config.py), as OneTrainer's StableDiffusionModelSaver writes both."""
    state = to_original_state_dict(unet, vae, text_encoder, dtype)
    path = save_tensors(path, {**state, **(schedule or {})}, metadata or {})
    if config is not None:
        write_ldm_config(path, config)
    else:  # no LDM config for this UNet: an earlier save's yaml at this path would tell loaders the wrong thing
        sidecar_path(path).unlink(missing_ok=True)
    return path


def make_sampling_scheduler(sampler: NoiseScheduler | str, scheduler_config: Mapping, schedule_overrides: Mapping | None = None):
    """A diffusers scheduler for `sampler` with the model's betas and timestep settings, and the
    training's `schedule_overrides` (prediction type, zero terminal SNR).

    DPM++ SDE is the SDE variant of the multistep solver (as in OneTrainer), which needs no
    torchsde.
    """
    import diffusers

    class_name, overrides = SAMPLERS[NoiseScheduler(sampler)]
    schedule = dict(schedule_overrides or {})
    prediction = schedule.get("prediction_type", scheduler_config.get("prediction_type", "epsilon"))
    if prediction == "epsilon" and (schedule.get("rescale_betas_zero_snr") or scheduler_config.get("rescale_betas_zero_snr")):
        # an epsilon model cannot predict at zero signal (DDIM divides by it: black samples); it samples on the
        # original betas from the last timestep (trailing), as OneTrainer samples it
        schedule["rescale_betas_zero_snr"] = False
    # as keyword arguments: values in the config dict that were defaults when it was made are dropped
    return getattr(diffusers, class_name).from_config(dict(scheduler_config), **overrides, **schedule)


@register_family(ModelType.STABLE_DIFFUSION_15)
class StableDiffusion15(Family, HubLoading, KlVaeLatents, DdpmNoise):
    """The family interface every model family implements (see models/base.py for the list)."""

    tokenizer_folders = {"text_encoder": "tokenizer"}  # text encoder part -> its tokenizer's folder
    # where the configs of a single file come from when no local diffusers folder is given
    default_config_repo = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    # written to a saved single file's header (SAI model spec)
    modelspec_architecture = "stable-diffusion-v1"
    # text encoder part -> key of its vectors in an A1111 embedding file
    embedding_keys = {"text_encoder": "emp_params"}  # OneTrainer's key (sic); A1111, ComfyUI, diffusers take any lone key
    output_embedding_parts = ("text_encoder",)
    unet_in_channels = 4  # what the UNet takes (SD 2, SDXL and the inpainting models check it when loading)
    caption_windows = 1  # 75-token windows a caption is read in (max_token_length, models/long_captions.py)
    single_file_writer = staticmethod(save_sd_single_file)  # (path, unet, vae, *text encoders, dtype, metadata, **extras)

    def __init__(self, tokenizer, text_encoder, vae, unet, scheduler):
        self.tokenizer, self.text_encoder, self.vae, self.unet = tokenizer, text_encoder, vae, unet
        self._use_scheduler(scheduler)
        # "clip skip" per text encoder part, for training and sampling alike
        self.layer_skips: dict[str, int] = {}

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None,
             part_models: Mapping[str, str] | None = None) -> StableDiffusion15:
        """Load from a hub id, a local diffusers folder, a `.safetensors`/`.ckpt` single file or `tiny:sd15`.

        Weights load on the CPU and are then cast per part (`dtypes` keys: unet, text_encoder,
        vae; a part not named gets float32, whatever dtype its files hold). A single file takes its component configs from `config_dir` (a local
        diffusers folder of the same architecture) or else from the SD 1.5 hub repo. Every part
        comes from `name` (`part_models` is not read).
        """
        pipe = cls._load_pipeline(
            str(name or "").strip(), cache_dir=cache_dir, offline=offline, token=token, config_dir=config_dir
        )
        model = cls._from_pipeline(pipe)
        apply_vae_override(model, part_models, cache_dir=cache_dir, offline=offline, token=token)
        for part, dtype in part_dtypes(dtypes, model.parts).items():
            getattr(model, part).to(dtype=dtype)
        return model

    pipeline_class_name = "StableDiffusionPipeline"

    # keyword arguments for loading that pipeline
    _pipeline_load_kwargs: dict = {"safety_checker": None, "requires_safety_checker": False}

    @classmethod
    def _checked_unet_channels(cls, name: str, pipe):
        """`pipe`, whose UNet must take `unet_in_channels` inputs: a model of another type (an
        inpainting model picked as a plain one, or the other way round) fails here with what to
        do, not at the first step."""
        channels = pipe.unet.config.get("in_channels")
        if channels != cls.unet_in_channels:
            raise ModelLoadError(
                f"The UNet of '{name}' takes {channels} input channels but {cls.model_type.value} needs "
                f"{cls.unet_in_channels}; pick the model type that matches the model (inpainting models take 9)."
            )
        return pipe

    @classmethod
    def _from_pipeline(cls, pipe):
        return cls(pipe.tokenizer, pipe.text_encoder, pipe.vae, pipe.unet, pipe.scheduler)

    @classmethod
    def _load_pipeline(cls, name: str, *, cache_dir, offline, token, config_dir, components: Mapping | None = None):
        """`components`: parts already loaded (SD 3's text encoders from files of their own), given
        to a folder's or hub repo's pipeline loader, which then loads (and downloads) none of them."""
        StableDiffusionPipeline = cls._pipeline_class()

        if not name:
            raise ModelLoadError("No base model given. Enter a Hugging Face id, a diffusers folder or a .safetensors file.")
        no_safety = dict(cls._pipeline_load_kwargs) | dict(components or {})
        pipe = cls._tiny_or_folder(name, lambda folder, kw: StableDiffusionPipeline.from_pretrained(folder, local_files_only=True, **no_safety, **kw),
                                   "Stable Diffusion", "unet, vae, text_encoder, tokenizer, scheduler", ", or a .safetensors file")
        if pipe is not None:
            return pipe
        path = Path(name).expanduser()
        if path.is_file():
            if path.suffix.lower() not in SINGLE_FILE_SUFFIXES:
                raise ModelLoadError(
                    f"'{name}' is a file but not a checkpoint; use a .safetensors or .ckpt single file."
                )
            pipe = cls._load_single_file(path, cache_dir=cache_dir, offline=offline, token=token, config_dir=config_dir)
            # after the model type's defaults (SD 2: its prediction type; SDXL: ComfyUI's markers)
            pipe.scheduler = file_scheduler(path, pipe.scheduler)
            return pipe

        looks_local = (
            path.suffix.lower() in SINGLE_FILE_SUFFIXES
            or name.startswith(("/", ".", "~", "\\"))
            or re.match(r"^[A-Za-z]:[\\/]", name) is not None
            or name.count("/") > 1
        )
        if looks_local or not HUB_ID.fullmatch(name):
            raise ModelLoadError(
                f"Base model '{name}' was not found: no such file or folder. Check the path, "
                "or give a Hugging Face id like 'stable-diffusion-v1-5/stable-diffusion-v1-5'."
            )

        def from_hub():
            return StableDiffusionPipeline.from_pretrained(
                name, cache_dir=cache_dir, token=token, local_files_only=offline, **no_safety,
                **hub_variant(name, cache_dir=cache_dir, token=token, offline=offline),
            )

        hint = (
            "No local folder has that name and, offline, it is not in the local Hugging Face cache"
            + (f" ({cache_dir})" if cache_dir else "")
            + "; turn offline mode off to download it once, or pick a local folder or .safetensors file."
            if offline
            else "Check the id, your network and, for gated or private models, the access token."
        )
        return cls._guarded(name, from_hub, hint)

    @classmethod
    def _single_file_pipeline(cls):
        """The pipeline class that reads a single file, and its loading keyword arguments (SD 2
        depth: the plain pipeline, as the depth pipeline has no `from_single_file`)."""
        return cls._pipeline_class(), cls._pipeline_load_kwargs

    @classmethod
    def _load_single_file(cls, path: Path, *, cache_dir, offline, token, config_dir, components: Mapping | None = None):
        """`components`: parts already loaded, in place of the file's. A checkpoint in one of
        ComfyUI's quantized layouts is refused: diffusers' pipeline loader would read its weights
        without their scales."""
        from ot_gradio.models.comfy_quant import quantized_file

        if path.suffix.lower() == ".safetensors" and quantized_file(path):
            raise ModelLoadError(f"'{path.name}' holds weights in ComfyUI's scaled or mixed-precision layout, which this "
                                 "checkpoint's loader would read without their scales; give the bf16 / fp16 checkpoint (or a "
                                 "diffusers folder), and set the parts' Weight data type to quantize them.")
        StableDiffusionPipeline, load_kwargs = cls._single_file_pipeline()
        load_kwargs = dict(load_kwargs) | dict(components or {})

        config = cls._single_file_config(config_dir, cache_dir=cache_dir, offline=offline, model="the same model type")

        def from_file():
            return StableDiffusionPipeline.from_single_file(
                str(path),
                config=config,
                cache_dir=cache_dir,
                token=token,
                local_files_only=offline or bool(config_dir),
                **load_kwargs,
            )

        hint = (
            f"The component configs come from '{config_dir}'; check that it matches the checkpoint."
            if config_dir
            else f"The component configs come from the hub repo '{cls.default_config_repo}'"
            + "; check your network, or give a local diffusers folder as the config folder."
        )
        return cls._guarded(str(path), from_file, hint)

    # ---------------------------------------------------------------- parts

    def set_attention(self, mechanism: str, device: torch.device | str | None = None) -> None:
        """The UNet's attention (models/attention.py)."""
        set_classic_attention(self.unet, mechanism, device)

    # ---------------------------------------------------------------- training

    def tokenize(self, prompts: str | Sequence[str]) -> torch.Tensor:
        """Token ids padded and truncated to the text encoder's window (77 for CLIP); with
        `caption_windows` above 1, each prompt's windows of 75 as rows of their own (long_captions.py)."""
        if isinstance(prompts, str):
            prompts = [prompts]
        return window_ids(self.tokenizer, list(prompts), self.caption_windows)

    def encode_prompt(self, input_ids: torch.Tensor, layer_skip: int = 0) -> torch.Tensor:
        """Text encoder hidden states (B, tokens, width). Gradients flow when the encoder trains.

        `layer_skip` > 0 is "clip skip": the output of an earlier layer, final layer norm applied.
        """
        input_ids = input_ids.to(module_device(self.text_encoder))
        if layer_skip <= 0:
            return self.output_embedded("text_encoder", input_ids, self.text_encoder(input_ids)[0])
        out = self.text_encoder(input_ids, output_hidden_states=True)
        hidden = out.hidden_states[-(layer_skip + 1)]
        base = base_module(self.text_encoder)
        final_norm = getattr(base, "final_layer_norm", None) or base.text_model.final_layer_norm
        return self.output_embedded("text_encoder", input_ids, final_norm(hidden))

    def encode_text(self, captions: Sequence[str], grad: frozenset[str] | set[str] = frozenset()) -> dict[str, torch.Tensor]:
        """The denoiser's text conditioning for a batch of captions. Gradients flow through the
        text encoders named in `grad` (the ones being trained); the others run without them."""
        ids = self.tokenize(list(captions))
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            hidden = self.encode_prompt(ids, self.layer_skips.get("text_encoder", 0))
        return {"encoder_hidden_states": joined(hidden, self.caption_windows)}

    def predict(self, noisy_latents: torch.Tensor, timesteps: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The UNet's output (noise or velocity, see `prediction_type`) in the UNet's dtype.

        `conditioning` is what `encode_text` returned (or the hidden states themselves);
        `batch` (data.batches.Batch) carries what other families need besides (sizes, masks)."""
        hidden = conditioning["encoder_hidden_states"] if isinstance(conditioning, Mapping) else conditioning
        device, dtype = module_device(self.unet), input_dtype(self.unet)
        return self.unet(
            noisy_latents.to(device, dtype),
            timesteps.to(device),
            hidden.to(device, dtype),
        ).sample

    # ---------------------------------------------------------------- sampling

    def pipeline(self, sampler: NoiseScheduler | str | None = None):
        """A diffusers pipeline sharing this model's (possibly LoRA-wrapped) components, with
        the given sampler or else the model's own scheduler."""
        from diffusers import StableDiffusionPipeline

        if sampler is None:
            scheduler = type(self.scheduler).from_config(self.scheduler.config, **self.schedule_overrides)
        else:
            scheduler = make_sampling_scheduler(sampler, self.scheduler.config, self.schedule_overrides)
        pipe = StableDiffusionPipeline(
            vae=base_module(self.vae),
            text_encoder=base_module(self.text_encoder),
            tokenizer=self.tokenizer,
            unet=base_module(self.unet),
            scheduler=scheduler,
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def sampling_inputs(self, height: int, width: int, **inputs) -> dict:
        """Pipeline inputs a family needs besides the prompt (inpainting models: image and mask)."""
        if inputs:
            raise ValueError(f"{self.model_type.value} samples from a prompt alone; it takes no {', '.join(sorted(inputs))}")
        return {}

    def prompt_inputs(self, prompt: str, negative_prompt: str = "") -> dict:
        """The prompts as the pipeline's embedding inputs, made by `encode_text` as in training (its
        clip skip included: the pipeline's own `clip_skip` reads `text_encoder.text_model`, which
        transformers' CLIPTextModel no longer has), so that the text encoders can leave before the
        UNet runs. SDXL adds its pooled embeddings."""
        return {"prompt_embeds": self.encode_text([prompt])["encoder_hidden_states"],
                "negative_prompt_embeds": self.encode_text([negative_prompt or ""])["encoder_hidden_states"]}

    def guidance_rescale(self, pipe) -> dict:
        """With the noise schedule rescaled to zero terminal SNR (its sampler's 'trailing' spacing
        starts at the last timestep, OneTrainer's force_last_timestep), guidance is rescaled by
        `ZERO_SNR_GUIDANCE_RESCALE`, as OneTrainer samples such runs. The pipelines that take it:
        SD 1.x / 2.x and SDXL from a prompt, SDXL inpainting; diffusers' SD inpainting and depth
        pipelines have no such input and sample without it."""
        if not self.schedule_overrides.get("rescale_betas_zero_snr"):
            return {}
        if "guidance_rescale" not in inspect.signature(pipe.__call__).parameters:
            return {}
        return {"guidance_rescale": ZERO_SNR_GUIDANCE_RESCALE}

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 512, width: int = 512, steps: int = 20,
               cfg_scale: float = 7.0, seed: int = 0, sampler: NoiseScheduler | str = NoiseScheduler.DDIM,
               device: torch.device | str | None = None, **inputs):
        """One image (PIL) of exactly `width` x `height`. `inputs`: what `sampling_inputs` takes
        (inpainting models: image and mask).

        Runs in eval mode and restores each part's train mode and device afterwards. The size is
        rounded up to the VAE's multiple of 8 and the image resized back if needed.
        """
        gen_h, gen_w = generation_size(height, width, self.vae_scale_factor)
        with parked_for_sampling(self.parts, device, self.denoiser) as places, torch.no_grad():
            generator = torch.Generator(device="cpu").manual_seed(int(seed))
            pipe = self.pipeline(sampler)
            prompts = self.prompt_inputs(prompt, negative_prompt)
            places.release(self.text_encoder_names, pipe)  # encoded: the text encoders leave before the UNet runs
            image = pipe(
                **prompts,
                height=gen_h,
                width=gen_w,
                num_inference_steps=int(steps),
                guidance_scale=float(cfg_scale),
                generator=generator,
                output_type="pil",
                **self.guidance_rescale(pipe),
                **self.sampling_inputs(gen_h, gen_w, **inputs),
            ).images[0]
        return exact_size(image, width, height)

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None,
                         metadata: Mapping[str, str] | None = None) -> Path:
        """An original-layout `.safetensors` checkpoint (A1111, ComfyUI, `from_single_file`), atomically,
        written by `single_file_writer` from the UNet, the VAE and the text encoders."""
        self.check_plain_parts()
        modules = [base_module(getattr(self, part)) for part in ("unet", "vae", *self.text_encoder_names)]
        return self.single_file_writer(path, *modules, dtype=dtype, metadata=self.file_metadata(self.modelspec_architecture, metadata),
                                       **self.single_file_extras())

    def single_file_extras(self) -> dict:
        """More keyword arguments for `single_file_writer`: the training noise schedule's buffers, and
        the LDM config that says its prediction type (OneTrainer's two; SDXL: ComfyUI's markers too)."""
        version = 2 if is_open_clip(self.text_encoder.config) else 1
        config = ldm_config(version, int(self.unet.config.in_channels), self.prediction_type)
        return {"schedule": schedule_buffers(self.noise_scheduler), "config": config}

    def save_diffusers(self, directory: str | os.PathLike, dtype: DataType | torch.dtype | None) -> Path:
        """A diffusers folder, written to a temp folder next to `directory` and then swapped in.

        Weights are cast copy by copy, so the live model keeps its own dtype.
        """

        def write_rest(tmp: Path) -> None:
            for part in self.text_encoder_names:
                self.tokenizers[part].save_pretrained(tmp / self.tokenizer_folders[part])
            self.scheduler.save_pretrained(tmp / "scheduler")
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)
