"""Z-Image and Z-Image-Turbo: load, encode, predict, sample, save (a flow-matching family: the
shared core in training/flow_matching.py draws t, makes the noisy input and the target
`noise - latents`; this module maps t to the transformer and back).

What Z-Image is (diffusers' ZImagePipeline, OneTrainer's Z_IMAGE):
- One text encoder, Qwen3 (4B; `text_encoder`, a transformers Qwen3Model). Each prompt goes
  through the tokenizer's chat template as one user message with the generation prompt (and
  thinking on, so no empty think block), is padded to `text_encoder_sequence_length` tokens
  (blank: 512, the pipeline's `max_sequence_length`), and the second-to-last hidden state is
  taken (a layer skip goes further back). The transformer reads each prompt's embeddings WITHOUT
  its padding: a list of variable-length tensors. `encode_text` returns them padded to the
  window with zeros and a mask (`attention_mask`), so a batch and the text cache hold one tensor;
  `predict` cuts each prompt back to its own tokens, exactly what the pipeline feeds.
- ZImageTransformer2DModel (S3-DiT, single stream, patch 2) reads a list of latents of shape
  (C, 1, H, W) (a frame axis), the timestep as 1 - t (the fraction of signal) and predicts
  `latents - noise`: the pipeline steps with `-output`. So predict passes 1 - t and returns
  -output, the velocity of the contract.
- The VAE is Flux's (16 channels, shift and scaling factors); the scheduler FlowMatchEuler with
  shift 3 (Turbo: no dynamic shifting), whose config the core reads.
- Sampling: ZImagePipeline with our embeddings. The CFG scale is the pipeline's own
  `guidance_scale` (pred = pos + scale * (pos - neg); 0 turns CFG off, as Z-Image-Turbo is run);
  the negative prompt is used when it is on.
- Loading: a hub id, a diffusers folder, `tiny:z-image`, or the transformer file people download
  (`z_image_turbo_bf16.safetensors`, the original layout) through diffusers' `from_single_file`,
  with the text encoder, VAE and configs from a diffusers folder (the config folder) or the hub
  repo. Saving: a diffusers folder, or the transformer alone in the original layout
  (training/lora_keys_z_image.py, which also places LoRA keys as ComfyUI does).
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


class FullPrecisionLinear(torch.nn.Linear):
    """A Linear layer the quantizer leaves alone (training/quantize.py converts plain nn.Linear
    only): Z-Image's timestep embedder casts its input to its first weight's dtype, which would
    be float8 (diffusers lists t_embedder and cap_embedder as precision-sensitive)."""


def keep_embedders_unquantized(transformer: torch.nn.Module) -> None:
    """The layers under diffusers' `_skip_layerwise_casting_patterns` (t_embedder, cap_embedder:
    under 0.1% of the weights) stay in the compute type when the transformer is FLOAT_8 / INT_8 /
    NFLOAT_4, as OneTrainer's Z-Image presets quantize the main blocks only."""
    model = base_module(transformer)
    patterns = tuple(getattr(model, "_skip_layerwise_casting_patterns", None) or ("t_embedder", "cap_embedder"))
    for name, child in model.named_modules():
        if type(child) is torch.nn.Linear and name.split(".")[0] in patterns:
            child.__class__ = FullPrecisionLinear
QWEN_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"], "blocks": ["layers."]}


def transformer_presets(n_layers: int) -> dict[str, list[str]]:
    """OneTrainer's Z-Image presets: attention and feed-forward of the main layers, not the
    refiners (its `^(?=.*attention)(?!.*refiner).*` regexes), as plain name parts per layer."""
    attn = [f"layers.{i}.attention." for i in range(n_layers)]
    mlp = [f"layers.{i}.feed_forward." for i in range(n_layers)]
    return {"full": [], "attn-mlp": attn + mlp, "attn-only": attn, "blocks": ["layers."]}


@register_family(ModelType.Z_IMAGE)
class ZImage:
    """The family interface (models/base.py) and the flow contract for Z-Image."""

    model_type = ModelType.Z_IMAGE
    schedule_kind = "flow_matching"
    prediction_type = "flow"
    native_resolution = 1024
    denoiser = "transformer"
    text_encoder_names = ("text_encoder",)
    tokenizer_attrs = {"text_encoder": "tokenizer"}
    folder_parts = ("transformer", "text_encoder", "tokenizer", "vae", "scheduler")
    default_config_repo = "Tongyi-MAI/Z-Image"
    lora_base_model_version = "z_image"
    embedding_keys: dict[str, str] = {}  # no EMBEDDING method (as OneTrainer)
    transformer_file = True  # save_single_file writes the transformer alone (ORIGINAL_TRANSFORMER)
    bucket_step = 16  # VAE 8 x patch 2

    def __init__(self, components: Mapping):
        if components.get("text_encoder") is None or components.get("tokenizer") is None:
            raise ModelLoadError("The model has no text_encoder / tokenizer; Z-Image needs its Qwen3 text encoder. Pick a complete model.")
        self.tokenizer = components["tokenizer"]
        self.text_encoder = components["text_encoder"]
        self.vae = components["vae"]
        self.transformer = components["transformer"]
        self.scheduler = components["scheduler"]
        self.noise_scheduler = self.scheduler
        self._layer_skips: dict[str, int] = {}
        self.text_encoder_sequence_length = None

    # the VAE side is SD's (encode_images / decode_latents apply shift_factor and scaling_factor)
    to = StableDiffusion15.to
    vae_id = StableDiffusion15.vae_id
    vae_scale_factor = StableDiffusion15.vae_scale_factor
    encode_images = StableDiffusion15.encode_images
    decode_latents = StableDiffusion15.decode_latents
    parts = FluxDev1.parts
    tokenizers = FluxDev1.tokenizers
    _part_names = classmethod(FluxDev1._part_names.__func__)
    set_attention = FluxDev1.set_attention
    pipeline = FluxDev1.pipeline

    # ---------------------------------------------------------------- loading

    @classmethod
    def _pipeline_class(cls):
        from diffusers import ZImagePipeline

        return ZImagePipeline

    @classmethod
    def _transformer_class(cls):
        from diffusers import ZImageTransformer2DModel

        return ZImageTransformer2DModel

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None):
        """From a hub id, a diffusers folder, `tiny:z-image` or the transformer file (text encoder,
        VAE and configs from `config_dir`, else the hub repo). Each part loads in its dtype
        (`dtypes`; float32 when not named)."""
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
            raise ModelLoadError(f"'{name}' is not a Z-Image model (no Z-Image transformer); pick the model type that matches it.")
        model = cls(pipe.components)
        for part, module in model.parts.items():
            if module_dtype(module) != per_part[part]:
                module.to(dtype=per_part[part])
        return model

    @classmethod
    def _load_single_file(cls, path: Path, *, cache_dir, offline, token, dtype, config_dir):
        """The original-layout transformer file through diffusers' from_single_file (its
        converter splits the fused qkv); the other parts and every config from `config_dir` or
        the hub repo."""
        if config_dir and not (Path(config_dir).expanduser() / "model_index.json").is_file():
            raise ModelLoadError(
                f"The config folder '{config_dir}' is not a diffusers model (no model_index.json); "
                "point it to a diffusers folder of Z-Image."
            )
        if config_dir:
            config = str(Path(config_dir).expanduser())
        elif offline:
            config = StableDiffusion15._cached_config_repo.__func__(cls, cache_dir)
        else:
            config = cls.default_config_repo
        hub = {"local_files_only": True} if Path(config).is_dir() else {"cache_dir": cache_dir, "token": token, "local_files_only": offline}

        def load():
            transformer = cls._transformer_class().from_single_file(
                str(path), config=config, subfolder="transformer", torch_dtype=dtype["transformer"], **hub
            )
            return cls._pipeline_class().from_pretrained(config, transformer=transformer, dtype=dtype, **hub)

        hint = (
            f"The text encoder, VAE and configs come from '{config_dir}'; check that it is a Z-Image diffusers folder "
            "and the file a Z-Image transformer checkpoint."
            if config_dir
            else f"The text encoder, VAE and configs come from the hub repo '{cls.default_config_repo}'; check your network, "
            "or give a local diffusers folder as the config folder."
        )
        return StableDiffusion15._guarded(str(path), load, hint)

    # ---------------------------------------------------------------- parts and options

    @property
    def lora_layer_presets(self) -> dict[str, dict[str, list[str]]]:
        return {"transformer": transformer_presets(int(base_module(self.transformer).config.n_layers)), "text_encoder": QWEN_PRESETS}

    @property
    def layer_skips(self) -> dict[str, int]:
        return self._layer_skips

    @layer_skips.setter
    def layer_skips(self, skips: Mapping[str, int]) -> None:
        """Checked here: the pipeline reads the second-to-last layer, a skip goes further back."""
        checked = {}
        for part, skip in dict(skips).items():
            skip = int(skip or 0)
            top = int(base_module(self.text_encoder).config.num_hidden_layers) - 1
            if not 0 <= skip <= top:
                raise ValueError(f"{part}_layer_skip: {skip} is out of range; this model's text encoder allows 0 to {top}")
            checked[part] = skip
        self._layer_skips = checked

    def configure_noise_schedule(self, *, prediction_type: str | None = None, zero_terminal_snr: bool = False) -> None:
        if prediction_type:
            raise ValueError("force_v_prediction / force_epsilon_prediction: Z-Image is a flow-matching model; turn these options off")
        if zero_terminal_snr:
            raise ValueError(
                "rescale_noise_scheduler_to_zero_terminal_snr: Z-Image is a flow-matching model (its last timestep is pure "
                "noise already); turn this option off"
            )

    @property
    def text_encoder_sequence_length(self) -> int:
        return self._sequence_length

    @text_encoder_sequence_length.setter
    def text_encoder_sequence_length(self, length: int | None) -> None:
        """The token window (blank: 512, the pipeline's); the tokenizer's model_max_length follows
        it, so cached text embeddings are keyed by it."""
        self._sequence_length = int(length or DEFAULT_SEQUENCE_LENGTH)
        self.tokenizer.model_max_length = self._sequence_length

    def configure_flow(self, config) -> None:
        """The run's token window (`text_encoder_sequence_length`); the embedders are kept out of
        the quantization that follows (keep_embedders_unquantized)."""
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)
        keep_embedders_unquantized(self.transformer)

    # ---------------------------------------------------------------- text

    def chat_prompts(self, texts: Sequence[str]) -> list[str]:
        """Each prompt as the pipeline renders it: one user message, the generation prompt, thinking on."""
        return [
            self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True, enable_thinking=True
            )
            for text in texts
        ]

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, width), zero past each prompt's tokens,
        "attention_mask": (B, window) bool}: the pipeline's per-prompt embeddings (hidden state
        -2 - skip, padding removed), padded back to the window so batches stack."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        encoder = self.text_encoder
        out = self.tokenizer(
            self.chat_prompts(texts), padding="max_length", max_length=self.text_encoder_sequence_length, truncation=True,
            return_tensors="pt",
        )
        device = module_device(encoder)
        ids, mask = out.input_ids.to(device), out.attention_mask.to(device).bool()
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            hidden = encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
            hidden = hidden[-(2 + self.layer_skips.get("text_encoder", 0))]
            hidden = hidden * mask.unsqueeze(-1).to(hidden.dtype)
        return {"encoder_hidden_states": hidden, "attention_mask": mask}

    @staticmethod
    def prompt_list(conditioning: Mapping, device=None, dtype=None) -> list[torch.Tensor]:
        """The pipeline's list of per-prompt embeddings (each cut to its own tokens)."""
        hidden, mask = conditioning["encoder_hidden_states"], conditioning["attention_mask"].bool()
        return [h[m.to(h.device)].to(device, dtype) for h, m in zip(hidden, mask, strict=True)]

    # ---------------------------------------------------------------- training

    def image_seq_len(self, latents: torch.Tensor) -> int:
        return (latents.shape[-2] // 2) * (latents.shape[-1] // 2)

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,): the transformer
        reads each sample as (C, 1, H, W) with timestep 1 - t and predicts latents - noise."""
        transformer = self.transformer
        device, dtype = module_device(transformer), compute_dtype(transformer)
        b = noisy.shape[0]
        out = transformer(
            list(noisy.to(device, dtype).unsqueeze(2).unbind(0)),
            (1 - t.to(device, torch.float32)).expand(b),
            self.prompt_list(conditioning, device, dtype),
            return_dict=False,
        )[0]
        return -torch.stack(out).squeeze(2)

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        dtype = compute_dtype(self.transformer)
        inputs = {"prompt_embeds": self.prompt_list(self.encode_text([prompt]), dtype=dtype), "guidance_scale": float(cfg_scale)}
        if cfg_scale > 0:
            inputs["negative_prompt_embeds"] = self.prompt_list(self.encode_text([negative_prompt or ""]), dtype=dtype)
        return inputs

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, steps: int = 8,
               cfg_scale: float = 0.0, seed: int = 0, sampler: NoiseScheduler | str = NoiseScheduler.EULER,
               device: torch.device | str | None = None):
        """One image (PIL) of exactly `width` x `height`, generated at the next multiple of 16 px
        with the model's flow-matching Euler scheduler and its shift (every sampler choice: the
        only sampler Z-Image ships with). Parts keep their mode and device."""
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
                latents = self.pipeline()(
                    **self.pipeline_inputs(prompt, negative_prompt, cfg_scale), height=gen_h, width=gen_w,
                    num_inference_steps=int(steps), generator=generator, output_type="latent",
                    max_sequence_length=self.text_encoder_sequence_length,
                ).images
                pixels = self.decode_latents(latents).float()  # in the VAE's own dtype
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
        """A diffusers folder (ZImagePipeline.from_pretrained loads it), written atomically."""

        def write_rest(tmp: Path) -> None:
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.scheduler.save_pretrained(tmp / "scheduler")
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone in the original layout (ComfyUI's diffusion model loader and
        `from_single_file` read it); the text encoder and VAE are the base model's."""
        from ot_gradio.training.lora_keys_z_image import save_original_transformer

        for name, module in self.parts.items():
            plain_state_dict(module, name)  # no LoRA layers left in any part
        return save_original_transformer(
            path, plain_state_dict(self.transformer, "transformer"), torch_dtype(dtype),
            {"modelspec.architecture": "z-image", "ot_gradio.model_type": self.model_type.value, **(metadata or {})},
        )

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Identity renames for kohya LoRA files (the `_`-joined names cannot be split back by rule)."""
        from ot_gradio.training.lora_keys_sd3 import layer_paths

        return {part: {p: p for p in layer_paths(base_module(getattr(self, part)))} for part in ("transformer", "text_encoder")}
