"""Sana: load, encode, predict, sample, save (a flow-matching family: the shared core in
training/flow_matching.py draws t, makes the noisy input and the target `noise - latents`; this
module maps t to the transformer and back).

What Sana is (diffusers' SanaPipeline, OneTrainer's SANA):
- One text encoder, Gemma 2 (2B; `text_encoder`, a transformers Gemma2Model) with its tokenizer
  padding on the right. Each prompt is lower-cased and stripped, and the pipeline's "complex
  human instruction" (COMPLEX_HUMAN_INSTRUCTION, its lines joined by newlines) is put in front of
  it; the tokens are padded to the instruction's token count + `max_sequence_length` - 2 and the
  encoder's last hidden state is read with the attention mask. Of that sequence the first token
  (<bos>) and the last `max_sequence_length` - 1 are kept: `max_sequence_length` tokens (300, the
  config's `text_encoder_sequence_length` when set) with their mask. The negative prompt of a
  sample is encoded without the instruction, `max_sequence_length` tokens, as the pipeline does.
- SanaTransformer2DModel (linear attention, patch 1) reads the latents as they are (B, 32, H, W),
  the text with its mask, the timestep as t * 1000 * `timestep_scale` (the pipeline feeds the
  scheduler's timestep sigma * 1000 times that config value) and predicts the velocity.
- The VAE is a deep-compression autoencoder (AutoencoderDC, 32x per side, 32 latent channels):
  `encode` gives the latent itself (no distribution); latents are multiplied by its
  `scaling_factor` (0.41407), no shift.
- The repos sample with DPM-Solver in flow mode (flow_shift 3); training draws t with the core's
  FlowMatchEuler settings (`noise_scheduler`: the model's scheduler when it is FlowMatchEuler,
  else one built with the same shift).
- Loading: a hub id (Efficient-Large-Model/Sana_1600M_1024px_diffusers), a diffusers folder or
  `tiny:sana`. Single files are refused with advice; saving one is refused too (output the
  diffusers folder).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType, NoiseScheduler
from ot_gradio.models.common import ModelLoadError, base_module, module_device, module_dtype, save_diffusers_folder, torch_dtype
from ot_gradio.models.flux import FluxDev1, compute_dtype, load_flow_pipeline
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd15 import StableDiffusion15
from ot_gradio.models.z_image import QWEN_PRESETS

DEFAULT_SEQUENCE_LENGTH = 300
# SanaPipeline.__call__'s default `complex_human_instruction` (from Sana's app config)
COMPLEX_HUMAN_INSTRUCTION = (
    "Given a user prompt, generate an 'Enhanced prompt' that provides detailed visual descriptions suitable for image generation. Evaluate the level of detail in the user prompt:",
    "- If the prompt is simple, focus on adding specifics about colors, shapes, sizes, textures, and spatial relationships to create vivid and concrete scenes.",
    "- If the prompt is already detailed, refine and enhance the existing details slightly without overcomplicating.",
    "Here are examples of how to transform or refine prompts:",
    "- User Prompt: A cat sleeping -> Enhanced: A small, fluffy white cat curled up in a round shape, sleeping peacefully on a warm sunny windowsill, surrounded by pots of blooming red flowers.",
    "- User Prompt: A busy city street -> Enhanced: A bustling city street scene at dusk, featuring glowing street lamps, a diverse crowd of people in colorful clothing, and a double-decker bus passing by towering glass skyscrapers.",
    "Please generate only the enhanced description for the prompt below and avoid including any additional commentary or evaluations:",
    "User Prompt: ",
)
# The transformer's layer presets. Every layer but the depthwise conv of each feed-forward
# (`ff.conv_depth`, groups = width), which PEFT cannot adapt at a rank not divisible by its groups.
_BLOCK_LAYERS = ["attn1", "attn2", "ff.conv_inverted", "ff.conv_point"]
TRANSFORMER_PRESETS = {
    "full": ["patch_embed", "time_embed", "caption_projection", *_BLOCK_LAYERS, "proj_out"],
    "attn-mlp": _BLOCK_LAYERS, "attn-only": ["attn1", "attn2"], "blocks": _BLOCK_LAYERS,
}


@register_family(ModelType.SANA)
class Sana:
    """The family interface (models/base.py) and the flow contract for Sana."""

    model_type = ModelType.SANA
    schedule_kind = "flow_matching"
    prediction_type = "flow"
    native_resolution = 1024
    denoiser = "transformer"
    text_encoder_names = ("text_encoder",)
    tokenizer_attrs = {"text_encoder": "tokenizer"}
    folder_parts = ("transformer", "text_encoder", "tokenizer", "vae", "scheduler")
    default_config_repo = "Efficient-Large-Model/Sana_1600M_1024px_diffusers"
    lora_base_model_version = "sana"
    embedding_keys = {"text_encoder": "gemma"}  # OneTrainer's key (its SanaEmbeddingSaver)
    bucket_step = 32  # DC-AE 32 x patch 1
    single_file_layout = None  # load_flow_pipeline refuses single files with advice
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": QWEN_PRESETS}

    def __init__(self, components: Mapping):
        if components.get("text_encoder") is None or components.get("tokenizer") is None:
            raise ModelLoadError("The model has no text_encoder / tokenizer; Sana needs its Gemma 2 text encoder. Pick a complete model.")
        self.tokenizer = components["tokenizer"]
        self.tokenizer.padding_side = "right"  # as the pipeline sets it
        self.text_encoder = components["text_encoder"]
        self.vae = components["vae"]
        self.transformer = components["transformer"]
        self.scheduler = components["scheduler"]  # what samples use (DPM-Solver flow in the real repos)
        self.noise_scheduler = self._flow_scheduler(self.scheduler)
        self._layer_skips: dict[str, int] = {}
        self.text_encoder_sequence_length = DEFAULT_SEQUENCE_LENGTH

    to = StableDiffusion15.to
    vae_id = StableDiffusion15.vae_id
    parts = FluxDev1.parts
    tokenizers = FluxDev1.tokenizers
    _part_names = classmethod(FluxDev1._part_names.__func__)
    pipeline = FluxDev1.pipeline

    @staticmethod
    def _flow_scheduler(scheduler):
        from diffusers import FlowMatchEulerDiscreteScheduler

        if isinstance(scheduler, FlowMatchEulerDiscreteScheduler):
            return scheduler
        shift = float(scheduler.config.get("flow_shift", None) or 3.0)
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=int(scheduler.config.get("num_train_timesteps", 1000)), shift=shift)

    # ---------------------------------------------------------------- loading

    @classmethod
    def _pipeline_class(cls):
        from diffusers import SanaPipeline

        return SanaPipeline

    @classmethod
    def _transformer_class(cls):
        from diffusers import SanaTransformer2DModel

        return SanaTransformer2DModel

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None):
        """From a hub id, a diffusers folder or `tiny:sana`; each part in its dtype (`dtypes`;
        float32 when not named). Single files are refused with what to use instead."""
        parts = cls._part_names()
        dtypes = dict(dtypes or {})
        unknown = set(dtypes) - set(parts)
        if unknown:
            raise ValueError(f"Unknown model part(s) {sorted(unknown)} in dtypes; expected {', '.join(parts)}.")
        per_part = {part: torch_dtype(dtypes.get(part)) for part in parts} | {"default": torch.float32}
        name = str(name or "").strip()
        pipe = load_flow_pipeline(cls, name, cache_dir=cache_dir, offline=offline, token=token, dtype=per_part, config_dir=config_dir)
        if not isinstance(getattr(pipe, "transformer", None), cls._transformer_class()):
            raise ModelLoadError(f"'{name}' is not a Sana model (no Sana transformer); pick the model type that matches it.")
        model = cls(pipe.components)
        for part, module in model.parts.items():
            if module_dtype(module) != per_part[part]:
                module.to(dtype=per_part[part])
        return model

    # ---------------------------------------------------------------- parts and options

    @property
    def layer_skips(self) -> dict[str, int]:
        return self._layer_skips

    @layer_skips.setter
    def layer_skips(self, skips: Mapping[str, int]) -> None:
        """Checked here: a skip reads an earlier layer of Gemma (with its final norm)."""
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
            raise ValueError("force_v_prediction / force_epsilon_prediction: Sana is a flow-matching model; turn these options off")
        if zero_terminal_snr:
            raise ValueError(
                "rescale_noise_scheduler_to_zero_terminal_snr: Sana is a flow-matching model (its last timestep is pure "
                "noise already); turn this option off"
            )

    @property
    def text_encoder_sequence_length(self) -> int:
        return self._sequence_length

    @text_encoder_sequence_length.setter
    def text_encoder_sequence_length(self, length: int | None) -> None:
        """The token window after the instruction (blank: 300, the pipeline's); the tokenizer's
        model_max_length follows it, so cached text embeddings are keyed by it."""
        self._sequence_length = int(length or DEFAULT_SEQUENCE_LENGTH)
        self.tokenizer.model_max_length = self._sequence_length

    def configure_flow(self, config) -> None:
        """The run's token window (`text_encoder_sequence_length`)."""
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)

    def set_attention(self, mechanism: str, device: torch.device | str | None = None) -> None:
        """SDP or DEFAULT (Sana's processors: linear self-attention and PyTorch's scaled-dot-product
        cross-attention); XFORMERS and FLASH are refused (no such kernels for linear attention)."""
        mechanism = str(getattr(mechanism, "value", mechanism)).upper()
        if mechanism not in ("DEFAULT", "SDP"):
            raise ValueError(f"attention_mechanism: {mechanism} is not available for Sana's linear attention; use SDP")

    # ---------------------------------------------------------------- images

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent along each side (32 for Sana's DC-AE)."""
        return 2 ** (len(self.vae.config.encoder_block_out_channels) - 1)

    @torch.no_grad()
    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Latents for pixels in [-1, 1] (B, 3, H, W) times the VAE's scaling factor (DC-AE's
        encoder is deterministic: `sample` changes nothing)."""
        latents = self.vae.encode(pixels.to(module_device(self.vae), module_dtype(self.vae))).latent
        return latents * self.vae.config.scaling_factor

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] for scaled latents (the inverse of `encode_images`)."""
        latents = latents / self.vae.config.scaling_factor
        return self.vae.decode(latents.to(module_device(self.vae), module_dtype(self.vae))).sample

    # ---------------------------------------------------------------- text

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset(),
                    instruction: bool = True):
        """{"encoder_hidden_states": (B, L, width), "attention_mask": (B, L)} with L the token
        window, exactly as SanaPipeline.encode_prompt makes them (`instruction=False`: as it
        encodes a negative prompt)."""
        texts = [str(t).lower().strip() for t in (captions["text_encoder"] if isinstance(captions, Mapping) else captions)]
        length = self.text_encoder_sequence_length
        tokenizer, encoder = self.tokenizer, self.text_encoder
        tokenizer.padding_side = "right"
        window = length
        if instruction:
            prefix = "\n".join(COMPLEX_HUMAN_INSTRUCTION)
            texts = [prefix + t for t in texts]
            window = len(tokenizer.encode(prefix, verbose=False)) + length - 2
        out = tokenizer(texts, padding="max_length", max_length=window, truncation=True, add_special_tokens=True,
                        return_tensors="pt", verbose=False)
        device = module_device(encoder)
        ids, mask = out.input_ids.to(device), out.attention_mask.to(device)
        skip = self.layer_skips.get("text_encoder", 0)
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            if skip <= 0:
                hidden = encoder(ids, attention_mask=mask)[0]
            else:
                states = encoder(ids, attention_mask=mask, output_hidden_states=True).hidden_states
                hidden = base_module(encoder).norm(states[-(skip + 1)])
        if instruction:
            keep = torch.tensor([0, *range(window - length + 1, window)], device=device)
            hidden, mask = hidden[:, keep], mask[:, keep]
        return {"encoder_hidden_states": hidden, "attention_mask": mask}

    # ---------------------------------------------------------------- training

    def image_seq_len(self, latents: torch.Tensor) -> int:
        patch = int(base_module(self.transformer).config.patch_size)
        return (latents.shape[-2] // patch) * (latents.shape[-1] // patch)

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,); the transformer
        reads the timestep as t * 1000 * timestep_scale."""
        transformer = self.transformer
        device, dtype = module_device(transformer), compute_dtype(transformer)
        config = base_module(transformer).config
        b = noisy.shape[0]
        timestep = (t.to(device, torch.float32) * 1000 * float(config.timestep_scale)).expand(b)
        out = transformer(
            noisy.to(device, dtype), encoder_hidden_states=conditioning["encoder_hidden_states"].to(device, dtype),
            encoder_attention_mask=conditioning["attention_mask"].to(device), timestep=timestep, return_dict=False,
        )[0]
        if int(config.out_channels) // 2 == noisy.shape[1]:  # a learned-sigma output: the first half
            out = out.chunk(2, dim=1)[0]
        return out

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Our embeddings (the trained window and layer skip) with CFG and the negative prompt."""
        dtype = compute_dtype(self.transformer)
        cond = self.encode_text([prompt])
        uncond = self.encode_text([negative_prompt or ""], instruction=False)
        return {
            "prompt_embeds": cond["encoder_hidden_states"].to(dtype), "prompt_attention_mask": cond["attention_mask"],
            "negative_prompt_embeds": uncond["encoder_hidden_states"].to(dtype),
            "negative_prompt_attention_mask": uncond["attention_mask"], "negative_prompt": None,
            "guidance_scale": float(cfg_scale),
        }

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, steps: int = 20,
               cfg_scale: float = 4.5, seed: int = 0, sampler: NoiseScheduler | str = NoiseScheduler.EULER,
               device: torch.device | str | None = None):
        """One image (PIL) of exactly `width` x `height`, generated at the next multiple of 32 px
        with the model's own scheduler (every sampler choice; DPM-Solver flow for the released
        models), CFG and the negative prompt. Parts keep their mode and device."""
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
                    num_inference_steps=int(steps), generator=generator, output_type="latent", use_resolution_binning=False,
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
        """A diffusers folder (SanaPipeline.from_pretrained loads it), written atomically."""

        def write_rest(tmp: Path) -> None:
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.scheduler.save_pretrained(tmp / "scheduler")
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.parts, dtype, write_rest)

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        raise ValueError("output_model_format: Sana is saved as a diffusers folder here (DIFFUSERS); no single-file layout is written")

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Identity renames for kohya LoRA files (the `_`-joined names cannot be split back by rule)."""
        from ot_gradio.training.lora_keys_sd3 import layer_paths

        return {part: {p: p for p in layer_paths(base_module(getattr(self, part)))} for part in ("transformer", "text_encoder")}
