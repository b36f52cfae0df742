"""Flux.1 dev: load, encode, predict, sample, save (a flow-matching family, models/base.py and
the flow contract: the shared core in training/flow_matching.py draws t, makes the noisy input
and the target `noise - latents`; this module maps t to the transformer and back).

What Flux is (OneTrainer's FluxModel / BaseFluxSetup, diffusers' FluxPipeline):
- Two text encoders: CLIP-L (`text_encoder`, 77 tokens) gives only its pooled output (the
  hidden state at the end-of-text token); T5 v1.1 XXL (`text_encoder_2`) gives the token
  sequence, padded to `text_encoder_2_sequence_length` tokens (512 when blank, as the
  pipeline does). A "clip skip" on T5 takes an earlier layer with T5's final norm applied.
- A 16-channel VAE whose latents are shifted and scaled: (z - shift_factor) * scaling_factor.
- The transformer (FluxTransformer2DModel) reads the latents as 2x2 patches (a sequence of
  (h/2)(w/2) tokens of 64 values) with a (0, row, column) position id per token; the text
  tokens get zero ids. Its timestep is t in (0, 1] itself (it multiplies by 1000 inside).
- Flux.1 dev is guidance-distilled: a guidance embedding takes the CFG value. Training feeds
  the config's `transformer.guidance_scale` (OneTrainer's), sampling the sample's CFG scale;
  there is no negative prompt.
- Loading: a hub id, a diffusers folder, `tiny:flux`, or Black Forest Labs' transformer file
  (`flux1-dev.safetensors`), whose text encoders, VAE and configs come from a diffusers folder
  (the config folder) or the hub repo. Saving: a diffusers folder, or the transformer alone in
  the BFL layout (the key map of training/lora_keys_flux.py, both ways).
"""

from __future__ import annotations

import contextlib
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
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd15 import _HUB_ID, SINGLE_FILE_SUFFIXES, StableDiffusion15
from ot_gradio.models.tiny import is_tiny, resolve_tiny

DEFAULT_T5_SEQUENCE_LENGTH = 512

# OneTrainer's BaseFluxSetup.LAYER_PRESETS for the transformer; the text encoders' own names
TRANSFORMER_PRESETS = {
    "full": [], "attn-mlp": ["attn", "ff.net", "proj_mlp"], "attn-only": ["attn"], "blocks": ["transformer_block"],
}
CLIP_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"]}
T5_PRESETS = {"full": [], "attn-mlp": ["SelfAttention", "DenseReluDense"], "attn-only": ["SelfAttention"]}


def _no_fp16_autocast(device: torch.device):
    """T5 overflows in float16; it runs outside a float16 autocast (OneTrainer's fallback)."""
    kind = device.type
    if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == torch.float16:
        return torch.autocast(kind, enabled=False)
    return contextlib.nullcontext()


def compute_dtype(module: torch.nn.Module) -> torch.dtype:
    """The dtype a part computes in: its first floating-point weight that is not a stored
    8-bit one (NF4/INT8 layers hold uint8/int8 weights, FLOAT_8 float8; their inputs are not)."""
    stored = (torch.float8_e4m3fn, torch.float8_e5m2)
    for p in module.parameters():
        if p.is_floating_point() and p.dtype not in stored:
            return p.dtype
    return torch.float32


# -------------------------------------------------------------------- latents <-> tokens


def pack_latents(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H/2 * W/2, C * 4): one token per 2x2 patch, row by row."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse of `pack_latents` for latents of `height` x `width`."""
    b, _, d = tokens.shape
    c = d // 4
    x = tokens.view(b, height // 2, width // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, height, width)


def latent_image_ids(height: int, width: int, device, dtype) -> torch.Tensor:
    """(H/2 * W/2, 3): (0, row, column) of each patch token, as the pipeline builds them."""
    rows = torch.arange(height // 2, device=device, dtype=dtype)
    cols = torch.arange(width // 2, device=device, dtype=dtype)
    ids = torch.zeros(height // 2, width // 2, 3, device=device, dtype=dtype)
    ids[..., 1] = rows[:, None]
    ids[..., 2] = cols[None, :]
    return ids.reshape(-1, 3)


# -------------------------------------------------------------------- loading (shared with Chroma)


def load_flow_pipeline(family, name: str, *, cache_dir, offline, token, dtype, config_dir):
    """A diffusers pipeline of `family` (its `_pipeline_class()`, hub repo and transformer
    class) from a hub id, a diffusers folder, `tiny:<name>` or a transformer-only single file;
    errors the user can fix are ModelLoadErrors saying what to do."""
    Pipeline = family._pipeline_class()
    guarded = StableDiffusion15._guarded
    if not name:
        raise ModelLoadError(
            f"No base model given. Enter a Hugging Face id (like '{family.default_config_repo}'), a diffusers folder "
            "or a transformer .safetensors file."
        )
    if is_tiny(name):
        try:
            folder = resolve_tiny(name).diffusers_dir
        except ValueError as e:
            raise ModelLoadError(str(e)) from e
        return Pipeline.from_pretrained(folder, local_files_only=True, dtype=dtype)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").is_file():
            raise ModelLoadError(
                f"The folder '{name}' is not a diffusers model (it has no model_index.json). "
                "Pick the folder that holds model_index.json, or a transformer .safetensors file."
            )
        return guarded(
            name,
            lambda: Pipeline.from_pretrained(path, local_files_only=True, dtype=dtype),
            f"The folder looks like a diffusers model but a part failed to load; check that it is a complete "
            f"{family.model_type.value} model ({', '.join(family.folder_parts)}).",
        )
    if path.is_file():
        if not family.single_file_layout:
            raise ModelLoadError(
                f"'{name}' is a single file; {family.model_type.value} loads from a diffusers folder or a Hugging Face id "
                f"(like '{family.default_config_repo}') here. Convert the file with diffusers' "
                f"{family._transformer_class().__name__}.from_single_file and save_pretrained first."
            )
        if path.suffix.lower() not in SINGLE_FILE_SUFFIXES:
            raise ModelLoadError(f"'{name}' is a file but not a checkpoint; use a .safetensors transformer file.")
        return _load_single_file(family, path, cache_dir=cache_dir, offline=offline, token=token, dtype=dtype, config_dir=config_dir)
    looks_local = path.suffix.lower() in SINGLE_FILE_SUFFIXES or name.startswith(("/", ".", "~", "\\")) or name.count("/") > 1
    if looks_local or not _HUB_ID.fullmatch(name):
        raise ModelLoadError(
            f"Base model '{name}' was not found: no such file or folder. Check the path, or give a Hugging Face id "
            f"like '{family.default_config_repo}'."
        )
    hint = (
        "No local folder has that name and, offline, it is not in the local Hugging Face cache"
        + (f" ({cache_dir})" if cache_dir else "")
        + "; turn offline mode off to download it once, or pick a local diffusers folder."
        if offline
        else "Check the id, your network and, for gated models like FLUX.1-dev, accept the license on the hub and set the access token."
    )
    return guarded(
        name, lambda: Pipeline.from_pretrained(name, cache_dir=cache_dir, token=token, local_files_only=offline, dtype=dtype), hint
    )


def _load_single_file(family, path: Path, *, cache_dir, offline, token, dtype, config_dir):
    """The BFL transformer file, converted by training/lora_keys_flux.py (diffusers'
    `from_single_file` converter assumes the full 3072 width), the other parts and every config
    from `config_dir` or the family's hub repo."""
    Pipeline, Transformer = family._pipeline_class(), family._transformer_class()
    if config_dir and not (Path(config_dir).expanduser() / "model_index.json").is_file():
        raise ModelLoadError(
            f"The config folder '{config_dir}' is not a diffusers model (no model_index.json); "
            f"point it to a diffusers folder of {family.model_type.value}."
        )
    if config_dir:
        config = str(Path(config_dir).expanduser())
    elif offline:
        config = StableDiffusion15._cached_config_repo.__func__(family, cache_dir)
    else:
        config = family.default_config_repo
    local = offline or bool(config_dir)
    part_dtype = dtype.get("transformer", torch.float32) if isinstance(dtype, Mapping) else dtype

    def load():
        from safetensors.torch import load_file

        from ot_gradio.training.lora_keys_flux import from_bfl

        kwargs = {"local_files_only": True} if Path(config).is_dir() else {"cache_dir": cache_dir, "token": token, "local_files_only": local}
        with torch.device("meta"):  # no float32 copy of a 12B model before the weights arrive
            transformer = Transformer.from_config(Transformer.load_config(config, subfolder="transformer", **kwargs))
        weights = {k: v.to(part_dtype) if v.is_floating_point() else v for k, v in from_bfl(transformer, load_file(str(path))).items()}
        transformer.load_state_dict(weights, strict=True, assign=True)
        return Pipeline.from_pretrained(config, transformer=transformer, dtype=dtype, **kwargs)

    hint = (
        f"The text encoders, VAE and configs come from '{config_dir}'; check that it is a {family.model_type.value} "
        "diffusers folder and that the file is a transformer checkpoint of that model."
        if config_dir
        else f"The text encoders, VAE and configs come from the hub repo '{family.default_config_repo}'; check your network "
        "and access token, or give a local diffusers folder as the config folder."
    )
    return StableDiffusion15._guarded(str(path), load, hint)


# -------------------------------------------------------------------- the family


@register_family(ModelType.FLUX_DEV_1)
class FluxDev1:
    """The family interface (models/base.py) and the flow contract for Flux.1 dev."""

    model_type = ModelType.FLUX_DEV_1
    schedule_kind = "flow_matching"
    native_resolution = 1024
    denoiser = "transformer"
    text_encoder_names = ("text_encoder", "text_encoder_2")
    tokenizer_attrs = {"text_encoder": "tokenizer", "text_encoder_2": "tokenizer_2"}
    folder_parts = ("transformer", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler")
    default_config_repo = "black-forest-labs/FLUX.1-dev"
    # kohya's ss_base_model_version for Flux.1 (sd-scripts' "flux1")
    lora_base_model_version = "flux1"
    transformer_file = True  # save_single_file writes the transformer alone (ORIGINAL_TRANSFORMER)
    embedding_keys = {"text_encoder": "clip_l", "text_encoder_2": "t5"}  # OneTrainer's keys
    bucket_step = 16  # VAE 8 x patch 2
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": CLIP_PRESETS, "text_encoder_2": T5_PRESETS}
    t5_part = "text_encoder_2"
    t5_length_option = "text_encoder_2_sequence_length"  # the config option of T5's token window
    single_file_layout = "bfl"  # the transformer file layout load/save_single_file read and write
    prediction_type = "flow"

    def __init__(self, components: Mapping):
        self.tokenizer = components.get("tokenizer")
        self.text_encoder = components.get("text_encoder")
        self.tokenizer_2 = components.get("tokenizer_2")
        self.text_encoder_2 = components.get("text_encoder_2")
        self.vae = components["vae"]
        self.transformer = components["transformer"]
        self.scheduler = components["scheduler"]  # FlowMatchEulerDiscreteScheduler, with the model's shift
        self.noise_scheduler = self.scheduler
        self.layer_skips: dict[str, int] = {}
        self.guidance_scale = 1.0
        self.t5_sequence_length = DEFAULT_T5_SEQUENCE_LENGTH

    # the VAE side is Stable Diffusion's (it applies shift_factor as well as scaling_factor)
    to = StableDiffusion15.to
    vae_id = StableDiffusion15.vae_id
    vae_scale_factor = StableDiffusion15.vae_scale_factor
    encode_images = StableDiffusion15.encode_images
    decode_latents = StableDiffusion15.decode_latents

    # ---------------------------------------------------------------- loading

    @classmethod
    def _pipeline_class(cls):
        from diffusers import FluxPipeline

        return FluxPipeline

    @classmethod
    def _transformer_class(cls):
        from diffusers import FluxTransformer2DModel

        return FluxTransformer2DModel

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None):
        """Each part loads straight in its dtype (`dtypes` keys: the parts; float32 when not named),
        so T5 XXL and the 12B transformer never sit in memory in float32 unasked."""
        parts = cls._part_names()
        dtypes = dict(dtypes or {})
        unknown = set(dtypes) - set(parts)
        if unknown:
            raise ValueError(f"Unknown model part(s) {sorted(unknown)} in dtypes; expected {', '.join(parts)}.")
        per_part = {part: torch_dtype(dtypes.get(part)) for part in parts} | {"default": torch.float32}
        pipe = load_flow_pipeline(
            cls, str(name or "").strip(), cache_dir=cache_dir, offline=offline, token=token, dtype=per_part, config_dir=config_dir
        )
        model = cls(pipe.components)
        for part, module in model.parts.items():
            if module_dtype(module) != per_part[part]:
                module.to(dtype=per_part[part])
        return model

    @classmethod
    def _part_names(cls) -> tuple[str, ...]:
        return ("transformer", *cls.text_encoder_names, "vae")

    # ---------------------------------------------------------------- parts and options

    @property
    def parts(self) -> dict[str, torch.nn.Module]:
        return {part: getattr(self, part) for part in self._part_names()}

    @property
    def tokenizers(self) -> dict:
        return {part: getattr(self, attr) for part, attr in self.tokenizer_attrs.items()}

    def configure_noise_schedule(self, *, prediction_type: str | None = None, zero_terminal_snr: bool = False) -> None:
        if prediction_type:
            raise ValueError(
                "force_v_prediction / force_epsilon_prediction: Flux is a flow-matching model that predicts the velocity; "
                "turn these options off"
            )
        if zero_terminal_snr:
            raise ValueError(
                "rescale_noise_scheduler_to_zero_terminal_snr: Flux is a flow-matching model (its last timestep is pure "
                "noise already); turn this option off"
            )

    def configure_flow(self, config) -> None:
        """The run's flow options: the guidance value trained and T5's token window. The T5
        tokenizer's model_max_length follows the window, so the text cache keys change with it."""
        self.guidance_scale = float(config.transformer.guidance_scale)  # unused by models without guidance embedding
        length = getattr(config, self.t5_length_option, None)
        self.t5_sequence_length = int(length or DEFAULT_T5_SEQUENCE_LENGTH)
        self.tokenizers[self.t5_part].model_max_length = self.t5_sequence_length

    def set_attention(self, mechanism: str, device: torch.device | str | None = None) -> None:
        """SDP (PyTorch's scaled-dot-product attention; DEFAULT is the same for Flux, whose
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

    def _tokens(self, part: str, texts: Sequence[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.tokenizers[part](
            list(texts), padding="max_length", max_length=length, truncation=True, return_tensors="pt"
        )
        return out.input_ids, out.attention_mask

    def encode_t5(self, texts: Sequence[str], grad: bool = False) -> torch.Tensor:
        """T5 hidden states (B, tokens, width); a layer skip takes an earlier layer with T5's final
        norm applied (OneTrainer's encode_t5). Padding is not masked, as Flux was trained."""
        encoder = getattr(self, self.t5_part)
        ids, _ = self._tokens(self.t5_part, texts, self.t5_sequence_length)
        device = module_device(encoder)
        skip = self.layer_skips.get(self.t5_part, 0)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()), _no_fp16_autocast(device):
            if skip <= 0:
                return encoder(ids.to(device))[0]
            out = encoder(ids.to(device), output_hidden_states=True)
            return base_module(encoder).encoder.final_layer_norm(out.hidden_states[-(skip + 1)])

    def encode_clip_pooled(self, texts: Sequence[str], grad: bool = False) -> torch.Tensor:
        """CLIP-L's pooled output: the final hidden state at the first end-of-text token (found
        from the tokenizer's id, so added embedding tokens never move it)."""
        tokenizer = self.tokenizer
        ids, _ = self._tokens("text_encoder", texts, tokenizer.model_max_length)
        device = module_device(self.text_encoder)
        ids = ids.to(device)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            hidden = self.text_encoder(ids)[0]
        positions = (ids == tokenizer.eos_token_id).int().argmax(dim=-1)
        return hidden[torch.arange(ids.shape[0], device=device), positions]

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": T5's sequence, "pooled_projections": CLIP-L's pooled output};
        `captions` is one list or one per text encoder part (caption dropout per encoder)."""
        texts = {part: list(captions[part] if isinstance(captions, Mapping) else captions) for part in self.text_encoder_names}
        hidden = self.encode_t5(texts[self.t5_part], self.t5_part in grad)
        pooled = self.encode_clip_pooled(texts["text_encoder"], "text_encoder" in grad)
        return {"encoder_hidden_states": hidden, "pooled_projections": pooled.to(hidden.device)}

    # ---------------------------------------------------------------- training

    def image_seq_len(self, latents: torch.Tensor) -> int:
        return (latents.shape[-2] // 2) * (latents.shape[-1] // 2)

    def transformer_inputs(self, conditioning: Mapping, batch_size: int, image_tokens: int, device, dtype) -> dict:
        """The conditioning inputs besides the image and text tokens (Flux: pooled CLIP and guidance)."""
        inputs = {"pooled_projections": conditioning["pooled_projections"].to(device, dtype)}
        if base_module(self.transformer).config.guidance_embeds:
            inputs["guidance"] = torch.full((batch_size,), self.guidance_scale, device=device, dtype=dtype)
        return inputs

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,), in the
        transformer's dtype."""
        transformer = self.transformer
        device, dtype = module_device(transformer), compute_dtype(transformer)
        b, _, h, w = noisy.shape
        hidden = conditioning["encoder_hidden_states"].to(device, dtype)
        out = transformer(
            hidden_states=pack_latents(noisy.to(device, dtype)),
            timestep=t.to(device, dtype).expand(b),
            encoder_hidden_states=hidden,
            txt_ids=torch.zeros(hidden.shape[1], 3, device=device, dtype=dtype),
            img_ids=latent_image_ids(h, w, device, dtype),
            return_dict=False,
            **self.transformer_inputs(conditioning, b, self.image_seq_len(noisy), device, dtype),
        )[0]
        return unpack_latents(out, h, w)

    # ---------------------------------------------------------------- sampling

    def pipeline(self):
        """The family's diffusers pipeline sharing this model's (possibly adapter-wrapped) parts."""
        components = {part: base_module(module) for part, module in self.parts.items()}
        components.update({attr: self.tokenizers[part] for part, attr in self.tokenizer_attrs.items()})
        scheduler = type(self.scheduler).from_config(self.scheduler.config)
        pipe = self._pipeline_class()(scheduler=scheduler, **components)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Flux.1 dev: the prompt's embeddings and the distilled guidance value (no negative prompt)."""
        cond = self.encode_text([prompt])
        dtype = compute_dtype(self.transformer)
        return {
            "prompt_embeds": cond["encoder_hidden_states"].to(dtype),
            "pooled_prompt_embeds": cond["pooled_projections"].to(dtype),
            "guidance_scale": float(cfg_scale),
            "max_sequence_length": self.t5_sequence_length,
        }

    def sampling_inputs(self, height: int, width: int, **inputs) -> dict:
        """Pipeline inputs besides the prompt, for an image of `height` x `width` (Flux Fill: the
        image and its mask); a text-to-image family takes none."""
        if inputs:
            raise ValueError(f"{self.model_type.value} samples from a prompt alone; it takes no {', '.join(sorted(inputs))}")
        return {}

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, steps: int = 20,
               cfg_scale: float = 3.5, seed: int = 0, sampler: NoiseScheduler | str = NoiseScheduler.EULER,
               device: torch.device | str | None = None, **inputs):
        """One image (PIL) of exactly `width` x `height`, generated at the next multiple of 16 px.
        Every sampler choice samples with the model's flow-matching Euler scheduler and its
        resolution-dependent shift (the only sampler Flux ships with, as in OneTrainer). Parts
        keep their mode and device. `inputs`: what `sampling_inputs` takes (Fill: image, mask)."""
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
                    **self.pipeline_inputs(prompt, negative_prompt, cfg_scale), **self.sampling_inputs(gen_h, gen_w, **inputs),
                    height=gen_h, width=gen_w, num_inference_steps=int(steps), generator=generator, output_type="latent",
                ).images
                # decoded here, in the VAE's own dtype (the transformer may compute in another)
                scale = self.vae_scale_factor
                pixels = self.decode_latents(unpack_latents(packed, gen_h // scale, gen_w // scale)).float()
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
        """A diffusers folder (the pipeline's from_pretrained loads it), written atomically."""

        def write_rest(tmp: Path) -> None:
            for part, attr in self.tokenizer_attrs.items():
                self.tokenizers[part].save_pretrained(tmp / attr)
            self.scheduler.save_pretrained(tmp / "scheduler")
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None) -> Path:
        """The transformer alone in Black Forest Labs' layout (what ComfyUI's diffusion-model
        loader, Forge and `from_single_file` read); the text encoders and VAE are the base model's."""
        from ot_gradio.training.lora_keys_flux import save_bfl_transformer

        return save_bfl_transformer(
            path, base_module(self.transformer), plain_state_dict(self.transformer, "transformer"), torch_dtype(dtype),
            metadata={"modelspec.architecture": "flux-1-dev", "ot_gradio.model_type": self.model_type.value},
        )
