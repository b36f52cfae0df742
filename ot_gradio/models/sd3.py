"""Stable Diffusion 3 and 3.5: load, encode, predict, sample, save (the flow contract of
models/base.py; the training objective is training/flow_matching.py's).

What SD 3 is (diffusers' StableDiffusion3Pipeline, OneTrainer's StableDiffusion3Model):
- Three text encoders: CLIP-L (`text_encoder`) and OpenCLIP-G (`text_encoder_2`), both
  `CLIPTextModelWithProjection`, and T5 v1.1 XXL (`text_encoder_3`). The CLIPs' second-to-last
  hidden states side by side (768 + 1280) are zero-padded to T5's width (4096) and put before
  T5's tokens along the sequence; the pooled input is both CLIP projections side by side. Clip
  skip counts from that second-to-last layer per CLIP (as SDXL); T5's skip takes an earlier layer
  with T5's final norm. T5 reads `text_encoder_3_sequence_length` tokens (OneTrainer's 77 by
  default), in training and in samples alike, with no padding mask, as trained;
  with transformer.attention_mask the three outputs' padding tokens are zeroed (OneTrainer's).
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
diffusers folder, or the transformer, VAE and the text encoders the model holds as a single file
in SAI's layout (models/sd3_single_file.py). LoRA keys: models/sd3_keys.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.comfy_quant import quantized_file
from ot_gradio.models.common import (
    HUB_ID,
    SINGLE_FILE_SUFFIXES,
    ModelLoadError,
    base_module,
    input_dtype,
    module_device,
    module_dtype,
)
from ot_gradio.models.excluded_parts import caption_lists, left_out, split_width, zeros
from ot_gradio.models.flow_family import FlowFamily
from ot_gradio.models.registry import register_family
from ot_gradio.models.sd15 import StableDiffusion15
from ot_gradio.models.sdxl import StableDiffusionXL
from ot_gradio.models.text_encoder_file import parts_from_files
from ot_gradio.models.transformer_file import transformer_file_source
from ot_gradio.models.weight_variants import local_variant, part_keywords

T5_PART = "text_encoder_3"
CLIP_LENGTH = 77  # the CLIP tokenizers' window
CLIP_PARTS = ("text_encoder", "text_encoder_2")
DEFAULT_T5_SEQUENCE_LENGTH = 77
TOKENIZERS = {"text_encoder": "tokenizer", "text_encoder_2": "tokenizer_2", "text_encoder_3": "tokenizer_3"}
# OneTrainer's LAYER_PRESETS for SD 3's transformer; the text encoders' own names ("blocks" and
# "full" adapt every layer of a text encoder, as OneTrainer's text encoder LoRA does)
TRANSFORMER_PRESETS = {"full": [], "attn-mlp": ["attn", "ff.net"], "attn-only": ["attn"], "blocks": ["transformer_block"]}
CLIP_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"], "blocks": []}
T5_PRESETS = {"full": [], "attn-mlp": ["SelfAttention", "DenseReluDense"], "attn-only": ["SelfAttention"], "blocks": []}


@register_family(ModelType.STABLE_DIFFUSION_3)
class StableDiffusion3(FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Stable Diffusion 3."""
    fp16_unstable = ("text_encoder_3",)  # T5 overflows in float16

    text_encoder_description = "CLIP-L, CLIP-G and T5 (a single file: with a complete diffusers folder as the config folder)"
    tokenizer_attrs = TOKENIZERS
    tokenizer_folders = TOKENIZERS
    modelspec_architecture = "stable-diffusion-v3-medium"  # SAI model spec, in saved files' headers
    embedding_keys = {"text_encoder": "clip_l", "text_encoder_2": "clip_g", "text_encoder_3": "t5"}  # OneTrainer's
    output_embedding_parts = ("text_encoder", "text_encoder_2", "text_encoder_3")
    patch_size = None  # the transformer config's (it patches itself)
    t5_part = T5_PART
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": CLIP_PRESETS,
                          "text_encoder_2": CLIP_PRESETS, "text_encoder_3": T5_PRESETS}
    default_steps, default_cfg_scale = 28, 7.0
    _pipeline_load_kwargs: dict = {}

    def __init__(self, components: Mapping):
        super().__init__(components)
        self.t5_sequence_length = DEFAULT_T5_SEQUENCE_LENGTH

    # ---------------------------------------------------------------- loading

    pipeline_class_name = "StableDiffusion3Pipeline"
    transformer_class_name = "SD3Transformer2DModel"

    @classmethod
    def _load_pipeline(cls, name: str, *, cache_dir, offline, token, dtype, config_dir,
                       part_files: Mapping[str, Path] | None = None):
        """SD 1.5's loading paths and errors (sd15.py: the whole single file through the pipeline's
        `from_single_file`, or `_load_single_file` below), with this family's pipeline and hub
        repo; the parts are cast to their dtypes after loading. `part_files`: text
        encoders (and a VAE) from files of their own, read with the configs of the folder, repo or config
        folder, and given to the pipeline's loader, which then fetches none of their weights."""
        files = dict(part_files or {})
        path = Path(name).expanduser()
        if files and path.is_file() and path.suffix.lower() in SINGLE_FILE_SUFFIXES:
            return cls._load_single_file(path, cache_dir=cache_dir, offline=offline, token=token, config_dir=config_dir,
                                         dtype=dtype, part_files=files)
        components = {}
        source = cls._parts_source(name, cache_dir=cache_dir, offline=offline, token=token) if files else None
        if source is not None:  # else SD 1.5's loading says what is wrong with the name
            hint = ("The text encoder files are read with its configs, and offline it is not in the local Hugging Face cache; "
                    "turn offline mode off to download it once, or pick a local folder or .safetensors file." if offline else
                    "The text encoder files are read with its configs; check the id, your network and, for gated models, the "
                    "access token.")
            components = cls._guarded(name, lambda: parts_from_files(files, *source, dtype), hint)
        components = {**components, **left_out(cls.tokenizer_attrs)}  # text encoders left out of the run: not read
        return StableDiffusion15._load_pipeline.__func__(cls, name, cache_dir=cache_dir, offline=offline, token=token,
                                                          config_dir=config_dir, components=components)

    @classmethod
    def _parts_source(cls, name: str, *, cache_dir, offline, token) -> tuple[str | Path, dict] | None:
        """Where a folder's or hub repo's configs of the parts given as files are read (with the loading keywords):
        a tiny model's or diffusers folder, a hub id; None for anything SD 1.5's loading refuses."""
        from ot_gradio.models.tiny import is_tiny, resolve_tiny

        if is_tiny(name):
            try:
                return resolve_tiny(name).diffusers_dir, {"local_files_only": True}
            except ValueError:
                return None
        path = Path(name).expanduser()
        if (path / cls.folder_index).is_file():
            return path, {"local_files_only": True}
        if path.exists() or name.startswith(("/", ".", "~", "\\")) or name.count("/") != 1 or not HUB_ID.fullmatch(name):
            return None
        return name, {"cache_dir": cache_dir, "token": token, "local_files_only": offline}

    @classmethod
    def _single_file_pipeline(cls):
        """The pipeline that reads an `incl_clips` file whole, for SD 1.5's single-file loading."""
        return cls._pipeline_class(), cls._pipeline_load_kwargs

    @classmethod
    def _load_single_file(cls, path: Path, *, cache_dir, offline, token, config_dir, dtype=None,
                          part_files: Mapping[str, Path] | None = None):
        """SAI's single file: with its text encoders in it (the `incl_clips` files) diffusers loads
        it whole; without (sd3.5_large.safetensors: MMDiT + VAE) the transformer and VAE come
        from the file and the rest from the config folder or repo, which diffusers' pipeline
        loader does not do by itself. Text encoders (and a VAE) from `part_files` replace the file's
        or the repo's. A file with some of them (one left out when it was saved) takes the CLIP it lacks
        from the config folder or repo too (diffusers' reader would refuse it), and CLIP-L's projection
        is the file's where it holds one (diffusers' reader puts the identity in its place); T5's
        embedding is tied again, as transformers loads it."""
        from safetensors import safe_open

        from ot_gradio.models.sd3_single_file import CLIP_L_PROJECTION, TEXT_ENCODER_PREFIXES

        try:
            with safe_open(str(path), framework="pt") as f:
                keys = set(f.keys())
                projection = f.get_tensor(CLIP_L_PROJECTION) if CLIP_L_PROJECTION in keys else None
        except Exception as e:
            raise ModelLoadError(f"'{path}' is not a readable .safetensors file ({e}); pick an SD 3 / 3.5 single file.") from e
        in_file = {part for part, prefix in TEXT_ENCODER_PREFIXES.items() if any(k.startswith(prefix) for k in keys)}
        files = dict(part_files or {})
        config, hub = cls._config_source(config_dir, cache_dir=cache_dir, offline=offline, token=token)
        # ComfyUI's quantized all-in-one file: its transformer and VAE read back to their values below, its text
        # encoders from their files or the config folder / repo (diffusers' pipeline loader would drop the scales)
        if in_file and not quantized_file(path):
            skipped = left_out(cls.tokenizer_attrs)

            def read_parts():
                parts = parts_from_files(files, config, hub, dtype or {})
                absent = [part for part in CLIP_PARTS if part not in {*parts, *skipped, *in_file}]
                return parts | cls._clips_from(config, hub, absent, dtype or {})

            components = cls._guarded(str(path), read_parts, cls._single_file_hint(config_dir, "text encoders' configs")) | skipped
            pipe = StableDiffusion15._load_single_file.__func__(
                cls, path, cache_dir=cache_dir, offline=offline, token=token, config_dir=config_dir, components=components
            )
            if projection is not None and "text_encoder" not in components:
                with torch.no_grad():
                    pipe.text_encoder.text_projection.weight.copy_(projection)
            if "text_encoder_3" in in_file and "text_encoder_3" not in components:
                pipe.text_encoder_3.tie_weights()  # diffusers' reader leaves its two embeddings apart
            return pipe

        def load():
            from diffusers import AutoencoderKL, SD3Transformer2DModel

            parts = parts_from_files(files, config, hub, dtype or {}) | left_out(cls.tokenizer_attrs)
            # ComfyUI's fp8-scaled file: its weights read back to their values (diffusers would drop the scales)
            dtypes = dict(dtype or {})
            source = transformer_file_source(path, dtypes.get("transformer", dtypes.get("default", torch.float32)))
            transformer = SD3Transformer2DModel.from_single_file(source, config=config, subfolder="transformer", **hub)
            vae = parts.pop("vae", None) or AutoencoderKL.from_single_file(source, config=config, subfolder="vae", **hub)
            return cls._pipeline_class().from_pretrained(config, transformer=transformer, vae=vae, **parts, **hub,
                                                         **local_variant(config))

        return cls._guarded(str(path), load, cls._single_file_hint(config_dir, "text encoders"))

    @staticmethod
    def _clips_from(config: str, hub: Mapping, parts: Sequence[str], dtypes: Mapping[str, torch.dtype]) -> dict:
        """The CLIP `parts` (CLIPTextModelWithProjection) from the config folder or repo."""
        from transformers import CLIPTextModelWithProjection

        return {part: CLIPTextModelWithProjection.from_pretrained(
                    config, subfolder=part, dtype=dtypes.get(part, dtypes.get("default", torch.float32)), **hub,
                    **part_keywords(config, part, hub))
                for part in parts}

    # ---------------------------------------------------------------- parts and options

    def configure_flow(self, config) -> None:
        """T5's token window for the run (the tokenizer's model_max_length follows it, so cached
        text embeddings are keyed by it). A T5 LoRA with diffusers keys is refused here, before training."""
        from ot_gradio.models.sd3_keys import check_lora_output

        check_lora_output(config)
        length = getattr(config, "text_encoder_3_sequence_length", None)
        self.t5_sequence_length = int(length or DEFAULT_T5_SEQUENCE_LENGTH)
        if self.tokenizer_3 is not None:  # (T5 left out: its zeros take the window)
            self.tokenizer_3.model_max_length = self.t5_sequence_length

    # ---------------------------------------------------------------- text

    def _encode_clip(self, part: str, texts: Sequence[str], grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden states of the second-to-last layer minus the skip, projected pooled output at
        the first end-of-text token, found from the tokenizer so added embedding tokens never move it)."""
        tokenizer, encoder = self.tokenizers[part], getattr(self, part)
        tokens = tokenizer(
            list(texts), padding="max_length", max_length=tokenizer.model_max_length, truncation=True, return_tensors="pt"
        )
        ids = tokens.input_ids.to(module_device(encoder))
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            out = encoder(ids, output_hidden_states=True)
            hidden = self.output_embedded(part, ids, out.hidden_states[-(2 + self.layer_skips.get(part, 0))])
            pooled = StableDiffusionXL._pooled(encoder, out.last_hidden_state, ids, tokenizer.eos_token_id)
        return self.padding_zeroed(hidden, tokens.attention_mask), pooled

    def _encode_t5(self, texts: Sequence[str], grad: bool) -> torch.Tensor:
        tokens = self.tokenizer_3(
            list(texts), padding="max_length", max_length=self.t5_sequence_length, truncation=True,
            add_special_tokens=True, return_tensors="pt",
        )
        return self.padding_zeroed(self.t5_hidden_states(T5_PART, tokens.input_ids, grad=grad), tokens.attention_mask)

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": CLIP-L | CLIP-G padded to T5's width, then T5's tokens;
        "pooled_projections": CLIP-L's and CLIP-G's projections side by side}, as
        StableDiffusion3Pipeline.encode_prompt builds them. `captions` is one list or one per
        text encoder part (caption dropout per encoder); gradients flow through the parts in `grad`."""
        texts, batch = caption_lists(captions, self.text_encoder_names)
        clips = {part: self._encode_clip(part, texts[part], part in grad) for part in CLIP_PARTS if part in texts}
        config = base_module(self.transformer).config  # a part left out (include: false) reads zeros of its output's shape
        t5 = self._encode_t5(texts[T5_PART], T5_PART in grad) if T5_PART in texts else \
            zeros(self.transformer, batch, self.t5_sequence_length, config.joint_attention_dim)
        device = t5.device
        widths = split_width(config.pooled_projection_dim, {part: p.shape[-1] for part, (_, p) in clips.items()}, CLIP_PARTS)
        for part in CLIP_PARTS:
            if part not in clips:  # CLIP-L's or CLIP-G's 77 tokens and pooled output (their widths are equal)
                clips[part] = (zeros(self.transformer, batch, CLIP_LENGTH, widths[part]), zeros(self.transformer, batch, widths[part]))
        (h1, p1), (h2, p2) = (clips[part] for part in CLIP_PARTS)
        clip = torch.cat([h1.to(device), h2.to(device)], dim=-1)
        clip = torch.nn.functional.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
        return {
            "encoder_hidden_states": torch.cat([clip.to(t5.dtype), t5], dim=-2),
            "pooled_projections": torch.cat([p1.to(device), p2.to(device)], dim=-1),
        }

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, 16, H, W) for noisy latents at noise fraction `t` (B,), in the
        transformer's dtype; the transformer reads the timestep as t * 1000."""
        device, dtype = module_device(self.transformer), input_dtype(self.transformer)
        b = noisy.shape[0]
        return self.transformer(
            hidden_states=noisy.to(device, dtype),
            encoder_hidden_states=conditioning["encoder_hidden_states"].to(device, dtype),
            pooled_projections=conditioning["pooled_projections"].to(device, dtype),
            timestep=(t.to(device, torch.float32) * 1000).expand(b),
            return_dict=False,
        )[0]

    # ---------------------------------------------------------------- sampling

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

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """`prompt_inputs` and CFG at `cfg_scale`."""
        return {**self.prompt_inputs(prompt, negative_prompt), "guidance_scale": float(cfg_scale)}

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer, VAE and every text encoder the model holds (trained or not, as
        OneTrainer writes them) in SAI's single-file layout (models/sd3_single_file.py), as the SD
        3.5 `incl_clips` files ship; a text encoder left out is not in it."""
        from ot_gradio.models.sd3_single_file import save_sd3_single_file

        self.check_plain_parts()
        text_encoders = {part: base_module(self.parts[part]) for part in self.text_encoder_names if self.parts.get(part) is not None}
        return save_sd3_single_file(
            path, base_module(self.transformer), base_module(self.vae), dtype,
            metadata=self.file_metadata(self.modelspec_architecture, metadata), text_encoders=text_encoders,
        )

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Renames for kohya LoRA files (models/sd3_keys.py): none, the names are diffusers'
        as OneTrainer writes them; given so reading a file maps every `_`-joined name back exactly."""
        from ot_gradio.models.sd3_keys import module_names

        return module_names(self)


@register_family(ModelType.STABLE_DIFFUSION_35)
class StableDiffusion35(StableDiffusion3):
    """SD 3.5 Large / Medium / Large Turbo: the same family; the transformer's config carries the
    q/k norms and Medium's dual attention layers."""

    @property
    def modelspec_architecture(self) -> str:
        """Medium's MMDiT-X has dual-attention layers (0-12), Large and Large Turbo none (SwarmUI's
        and the SAI spec's "stable-diffusion-v3.5-medium" / "-large")."""
        medium = bool(getattr(base_module(self.transformer).config, "dual_attention_layers", None))
        return "stable-diffusion-v3.5-medium" if medium else "stable-diffusion-v3.5-large"
