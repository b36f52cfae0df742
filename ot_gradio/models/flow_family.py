"""The base class of the diffusers-backed flow-matching families (Flux.1, Flux Fill, Chroma, SD 3,
Z-Image, Flux.2, Sana): the interface of models/base.py as a class, with what these families
share written once.

Held here: the parts and their bookkeeping (`parts`, `to`, `tokenizers`), the VAE side (a
shifted and scaled KL VAE; families with another VAE override `encode_images` /
`decode_latents`), attention setup, the loading skeleton (dtype per part, hub id / diffusers
folder / `tiny:` name / single file, the transformer-class check, the config folder of a single
file, all with ModelLoadErrors saying what to do), sampling with the parts parked and restored,
the atomic diffusers-folder save, the layer-skip check and the refusal of the DDPM-only options.

What a family writes: its class attributes, `encode_text`, `predict`, `configure_flow`,
`pipeline_inputs` (the prompt side of a sample) and, where it differs, the other hooks declared
below (`_single_file_transformer`, `_from_pipeline`, `sample_options`, `sampling_inputs`,
`decode_sample`, `_layer_skip_top`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType, NoiseScheduler
from ot_gradio.models.attention import reaches_attention_backends
from ot_gradio.models.common import (
    HUB_ID,
    SINGLE_FILE_SUFFIXES,
    ModelLoadError,
    base_module,
    cast_parts,
    module_device,
    part_dtypes,
    part_file,
    plain_state_dict,
    save_diffusers_folder,
    torch_dtype,
    wan_vae_decode,
    wan_vae_encode,
    weights_fingerprint,
)
from ot_gradio.models.excluded_parts import excluded_now, excluding, left_out, left_out_of, without_excluded
from ot_gradio.models.family import Family
from ot_gradio.models.family_parts import CheckedLayerSkips, HubLoading, KlVaeLatents, sentencepiece_files_readable
from ot_gradio.models.sampling_parts import exact_size, generation_size, parked_for_sampling
from ot_gradio.models.text_encoder_file import parts_from_files, text_encoder_files
from ot_gradio.models.transformer_file import gguf_options, transformer_file_source
from ot_gradio.models.vae_override import apply_vae_override, vae_file
from ot_gradio.models.weight_variants import hub_variant, local_variant


# latents <-> tokens, for the transformers that patchify 2x2 outside the model (Flux.1, Qwen-Image)
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


def trim_to_longest(conditioning: Mapping, device=None, dtype=None, keep_mask: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Prompt embeddings held as a window (`encoder_hidden_states`, each prompt's tokens first,
    `attention_mask` marking them) cut to the batch's longest prompt, and the mask (None when
    every token counts, unless `keep_mask`): what the Qwen-Image and Krea 2 pipelines feed."""
    hidden, mask = conditioning["encoder_hidden_states"], conditioning["attention_mask"].bool()
    if mask.device.type == "meta":  # the memory planner's probe: the whole window, the longest a caption can be
        return hidden.to(device, dtype), mask.to(device).long()
    longest = int(mask.sum(dim=1).max())
    everything = bool(mask[:, :longest].all())
    hidden, mask = hidden[:, :longest].to(device, dtype), mask[:, :longest].to(device)
    return hidden, (None if everything and not keep_mask else mask.long())


class WanImageLatents:
    """Images through a Wan-style video VAE one frame at a time (Qwen-Image's AutoencoderKLQwenImage,
    which Krea 2 shares): latents normalised per channel (common.wan_vae_encode), a pipeline's
    latent output packed in 2x2 patches (`decode_sample`)."""

    vae: torch.nn.Module

    @property
    def vae_id(self) -> str:
        """As KlVaeLatents.vae_id: the VAE's config, weights and their type, read when asked."""
        return "qwen-image-vae-" + weights_fingerprint(self.vae)

    @property
    def vae_scale_factor(self) -> int:
        return 2 ** len(base_module(self.vae).temperal_downsample)

    def encode_images(self, pixels: torch.Tensor, *, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Normalised latents (B, C, H/8, W/8) for pixels in [-1, 1]: a sample of the VAE's
        distribution by default (as OneTrainer), its mean with `sample=False`."""
        return wan_vae_encode(self.vae, pixels.unsqueeze(2), sample=sample, generator=generator).squeeze(2)

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] for normalised latents (the inverse of `encode_images`)."""
        return wan_vae_decode(self.vae, latents.unsqueeze(2)).squeeze(2)

    def decode_sample(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """The pipeline's packed latents (B, tokens, 4C) unpacked and decoded."""
        factor = self.vae_scale_factor
        return self.decode_latents(unpack_latents(latents, height // factor, width // factor))


def flow_training_scheduler(scheduler):
    """The FlowMatchEuler scheduler training draws t with: `scheduler` itself when it is one, else
    one at its `flow_shift` (repos that sample with DPM-Solver or UniPC in flow mode: Sana, Wan)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    if isinstance(scheduler, FlowMatchEulerDiscreteScheduler):
        return scheduler
    shift = float(scheduler.config.get("flow_shift", None) or 3.0)
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=int(scheduler.config.get("num_train_timesteps", 1000)), shift=shift)


class FlowFamily(Family, HubLoading, KlVaeLatents, CheckedLayerSkips):
    """A flow-matching family (models/base.py): subclass it, set the attributes, write the hooks."""

    model_type: ModelType
    # the model's name in messages ("Flux.1", "Z-Image"), the hub repo of configs (and missing parts)
    # for a single file and kohya's ss_base_model_version: from the description (config/family_info)
    family_name = ""
    schedule_kind = "flow_matching"  # the trainer's flow core (training/flow_matching.py) draws t and the target
    prediction_type = "flow"
    denoiser = "transformer"
    text_encoder_names: tuple[str, ...] = ("text_encoder",)  # text encoder parts, in order
    tokenizer_attrs: dict[str, str] = {"text_encoder": "tokenizer"}  # text encoder part -> its tokenizer attribute/folder
    folder_parts: tuple[str, ...] = ("transformer", "text_encoder", "tokenizer", "vae", "scheduler")  # for messages
    default_config_repo = ""
    lora_base_model_version = ""
    text_encoder_labels: tuple[str, ...] = ()  # from the description: what the text encoders are ("Qwen3")
    embedding_keys: dict[str, str] = {}  # text encoder part -> key in an embedding file ({}: no EMBEDDING method)
    bucket_step = 16  # image sides are multiples of this (VAE factor x patch)
    patch_size: int | None = 2  # latent pixels per image token side (None: the transformer config's patch_size)
    t5_part: str | None = None  # a T5 part: its layer skip reads an earlier layer with T5's final norm
    single_file_layout: str | None = None  # None: single files are refused; else `_single_file_transformer` reads them
    single_file_suffixes: tuple[str, ...] = SINGLE_FILE_SUFFIXES  # what a single file may end in
    # text encoder class -> how many of its layers encoding reads: a text encoder file may stop after them
    text_encoder_layers_read: Mapping[str, int] = {}
    text_encoder_reads_images = False  # its encoder reads images too: a text encoder file must hold the vision tower
    default_steps = 20  # `sample` defaults
    default_cfg_scale = 3.5
    transformer_class_name = ""  # the diffusers transformer class (pipeline_class_name: the pipeline's)
    pipeline_output = "images"  # the pipeline output's field with the latents (video pipelines: "frames")
    # the loaded pipeline's own config values (model_index.json) a pipeline built for sampling or
    # saving is given back (Krea 2: the text encoder layers it reads)
    pipeline_config_keys: tuple[str, ...] = ()
    pipeline_config: Mapping[str, object] = {}  # their values, set by `_from_pipeline`

    @property
    def text_encoder_description(self) -> str:
        """What a model without its text encoder is told it needs, from the description's labels
        ("its Qwen3 text encoder"); a family whose labels say too little states it instead."""
        *others, last = self.text_encoder_labels or ("",)
        named = f"{', '.join(others)} and {last}" if others else last
        return " ".join(filter(None, ("its", named, "text encoders" if others else "text encoder")))

    def __init__(self, components: Mapping):
        """The parts of a loaded pipeline; a missing text encoder or tokenizer is a ModelLoadError."""
        excluded = excluded_now() & set(self.tokenizer_attrs)  # text encoders left out of the run (include: false)
        for part, attr in self.tokenizer_attrs.items():
            if part in excluded:
                setattr(self, part, None)
                setattr(self, attr, None)
                continue
            if components.get(part) is None or components.get(attr) is None:
                raise ModelLoadError(f"The model has no {part} / {attr}; {self.family_name} needs "
                                     f"{self.text_encoder_description}. Pick a complete model.")
            setattr(self, part, components[part])
            setattr(self, attr, components[attr])
        without_excluded(self, excluded)
        self.vae = components["vae"]
        self.transformer = components["transformer"]
        self.scheduler = components["scheduler"]  # FlowMatchEulerDiscreteScheduler with the model's shift
        self.noise_scheduler = self.scheduler
        self._layer_skips: dict[str, int] = {}
        self.text_encoder_sequence_length = None  # the family's default token window until configure_flow sets the run's

    # ---------------------------------------------------------------- loading

    @classmethod
    def _transformer_class(cls):
        """The diffusers transformer class named by `transformer_class_name`; a loaded model whose
        transformer is not one is refused."""
        import diffusers

        return getattr(diffusers, cls.transformer_class_name)

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None,
             part_models: Mapping[str, str] | None = None, excluded: Collection[str] = ()):
        """From a hub id, a diffusers folder, a `tiny:` name or (`single_file_layout`) a transformer
        file with the other parts and the configs from `config_dir`, else the hub repo. Each part
        loads straight in its dtype (`dtypes` keys: the parts; float32 when not named).
        `part_models["transformer"]`: as OneTrainer, the transformer comes from that file (or
        Hugging Face file address) instead, read with the base model's transformer config.
        `excluded`: text encoders left out (include: false; models/excluded_parts.py): not read at all."""
        with excluding(excluded):
            return cls._load(name, cache_dir=cache_dir, offline=offline, token=token, dtypes=dtypes, config_dir=config_dir,
                             part_models={p: m for p, m in dict(part_models or {}).items() if p not in excluded})

    @classmethod
    def _load(cls, name: str, *, cache_dir, offline, token, dtypes, config_dir, part_models):
        per_part = part_dtypes(dtypes, cls.part_names) | {"default": torch.float32}
        name = str(name or "").strip()
        override = str(dict(part_models or {}).get("transformer") or "").strip()
        extra = {}
        if override:
            if not cls.single_file_layout:  # SD 3: OneTrainer reads no transformer file either
                raise ModelLoadError(f"transformer.model_name: {cls.family_name} loads its transformer from the base model only; "
                                     "leave it blank.")
            extra["transformer_file"] = part_file(override, "transformer.model_name", cache_dir=cache_dir, offline=offline, token=token)
            if extra["transformer_file"].suffix.lower() == ".gguf" and not cls.gguf_transformer:
                raise ModelLoadError(f"transformer.model_name: {cls.family_name} does not read .gguf transformer files; give a "
                                     ".safetensors file (FLOAT_8, INT_8 or NFLOAT_4 quantize it).")
        files = text_encoder_files(part_models, cls._file_text_encoders(), cache_dir=cache_dir, offline=offline, token=token)
        vae = vae_file(part_models, cache_dir=cache_dir, offline=offline, token=token) if cls.text_encoder_files else None
        if vae is not None:  # a VAE file goes in with them, so the base model's VAE is not fetched either
            files["vae"] = vae
        if files:  # only the families that read them take the keyword
            extra["part_files"] = files
        with sentencepiece_files_readable():
            pipe = cls._load_pipeline(name, cache_dir=cache_dir, offline=offline, token=token, dtype=per_part,
                                      config_dir=config_dir, **extra)
        if not isinstance(getattr(pipe, "transformer", None), cls._transformer_class()):
            raise ModelLoadError(f"'{name}' is not a {cls.family_name} model (no {cls.family_name} transformer); "
                                 "pick the model type that matches it.")
        model = cls._from_pipeline(pipe)
        if vae is None:  # a VAE folder or hub id replaces the loaded one
            apply_vae_override(model, part_models, cache_dir=cache_dir, offline=offline, token=token)
        cast_parts(model.parts, per_part)
        return model

    @classmethod
    def _from_pipeline(cls, pipe):
        """The family around a loaded pipeline, keeping its `pipeline_config_keys` (Flux.2 also
        reads the pipeline's config)."""
        model = cls(pipe.components)
        model.pipeline_config = {key: pipe.config[key] for key in cls.pipeline_config_keys if key in pipe.config}
        return model

    @classmethod
    def _file_text_encoders(cls) -> tuple[str, ...]:
        """The text encoders that may load from a file of their own (`text_encoder*.model_name`:
        FamilyInfo.text_encoder_files); () where a family reads none (its value is not read)."""
        return tuple(cls.text_encoder_names) if cls.text_encoder_files else ()

    @classmethod
    def _parts_from_files(cls, files: Mapping[str, Path], source: str | Path, hub: Mapping, dtype) -> dict:
        """The text encoders (and VAE) read from `files`, for the pipeline at `source`
        (models/text_encoder_file.py)."""
        return parts_from_files(files, source, hub, dtype, layers_read=cls.text_encoder_layers_read,
                                reads_images=cls.text_encoder_reads_images)

    @classmethod
    def _load_pipeline(cls, name: str, *, cache_dir, offline, token, dtype, config_dir, transformer_file: Path | None = None,
                       part_files: Mapping[str, Path] | None = None):
        """The pipeline from whatever `name` is, with the transformer from `transformer_file` and
        text encoders (and a VAE) from `part_files` when given; errors the user can fix say what to do."""
        files = dict(part_files or {})

        def pipeline(source: str | Path, hub: Mapping, variant: Mapping):
            parts = cls._parts_from_files(files, source, hub, dtype)
            if transformer_file is not None:
                parts["transformer"] = cls._single_file_transformer(transformer_file, str(source), hub, dtype["transformer"])
            return cls._pipeline_from(source, dtype, hub, **parts, **variant)

        if not name:
            raise ModelLoadError(
                f"No base model given. Enter a Hugging Face id (like '{cls.default_config_repo}'), a diffusers folder "
                "or a transformer .safetensors file."
            )
        pipe = cls._tiny_or_folder(name, lambda folder, kw: pipeline(folder, {"local_files_only": True}, kw),
                                   cls.model_type.value, ", ".join(cls.folder_parts),
                                   ", or a transformer .safetensors file" if cls.single_file_layout else "")
        if pipe is not None:
            return pipe
        path = Path(name).expanduser()
        if path.is_file():
            if transformer_file is not None:
                raise ModelLoadError(f"transformer.model_name: the base model '{name}' is a transformer file already; give "
                                     "a diffusers folder or Hugging Face id as the base model, or leave transformer.model_name blank.")
            if not cls.single_file_layout:
                raise ModelLoadError(
                    f"'{name}' is a single file; {cls.model_type.value} loads from a diffusers folder or a Hugging Face id "
                    f"(like '{cls.default_config_repo}') here. Convert the file with diffusers' "
                    f"{cls._transformer_class().__name__}.from_single_file and save_pretrained first."
                )
            if path.suffix.lower() not in cls.single_file_suffixes:
                raise ModelLoadError(f"'{name}' is a file but not a checkpoint; use a {' / '.join(cls.single_file_suffixes)} "
                                     "transformer file.")
            return cls._load_single_file(path, cache_dir=cache_dir, offline=offline, token=token, dtype=dtype, config_dir=config_dir,
                                         **({"part_files": files} if files else {}))
        looks_local = path.suffix.lower() in cls.single_file_suffixes or name.startswith(("/", ".", "~", "\\")) or name.count("/") > 1
        if looks_local or not HUB_ID.fullmatch(name):
            raise ModelLoadError(
                f"Base model '{name}' was not found: no such file or folder. Check the path, or give a Hugging Face id "
                f"like '{cls.default_config_repo}'."
            )
        hint = (
            "No local folder has that name and, offline, it is not in the local Hugging Face cache"
            + (f" ({cache_dir})" if cache_dir else "")
            + "; turn offline mode off to download it once, or pick a local diffusers folder."
            if offline
            else "Check the id, your network and, for gated models like FLUX.1-dev, accept the license on the hub and set the access token."
        )
        return cls._guarded(
            name, lambda: pipeline(name, {"cache_dir": cache_dir, "token": token, "local_files_only": offline},
                                         hub_variant(name, cache_dir=cache_dir, token=token, offline=offline)), hint
        )

    @classmethod
    def _pipeline_from(cls, source: str | Path, dtype, hub: Mapping, **parts):
        """The family's pipeline from a diffusers folder or hub repo (`hub`: its loading
        keywords), with `parts` given and text-only tokenizers where the model ships processors
        (put in after loading: diffusers refuses a tokenizer passed for a processor part)."""
        skipped = left_out(cls.tokenizer_attrs)  # text encoders left out of the run, and their tokenizers
        tokenizers = {k: v for k, v in cls._text_only_tokenizers(source, hub).items() if k not in skipped}
        pipe = cls._pipeline_class().from_pretrained(source, dtype=dtype, **dict.fromkeys(tokenizers), **parts, **skipped, **hub)
        if tokenizers:
            pipe.register_modules(**tokenizers)
        return pipe

    @classmethod
    def _config_source(cls, config_dir: str | None, *, cache_dir, offline, token) -> tuple[str, dict]:
        """Where a single file's configs and other parts come from (`config_dir`, which must be a
        diffusers folder, else the family's hub repo or, offline, its cached snapshot) and the
        loading keywords for it."""
        config = cls._single_file_config(config_dir, cache_dir=cache_dir, offline=offline, model=cls.family_name)
        hub = {"local_files_only": True} if Path(config).is_dir() else {"cache_dir": cache_dir, "token": token, "local_files_only": offline}
        return config, hub

    @classmethod
    def _load_single_file(cls, path: Path, *, cache_dir, offline, token, dtype, config_dir,
                          part_files: Mapping[str, Path] | None = None):
        """The transformer from the file (`_single_file_transformer`), text encoders from
        `part_files` (the VAE's too), the other parts and every config from `_config_source`."""
        config, hub = cls._config_source(config_dir, cache_dir=cache_dir, offline=offline, token=token)

        def load():
            parts = cls._parts_from_files(dict(part_files or {}), config, hub, dtype)
            transformer = cls._single_file_transformer(path, config, hub, dtype["transformer"])
            return cls._pipeline_from(config, dtype, hub, transformer=transformer, **parts, **local_variant(config))

        return cls._guarded(str(path), load, cls._single_file_hint(config_dir))

    @classmethod
    def _single_file_hint(cls, config_dir: str | None, other_parts: str = "text encoders, VAE") -> str:
        """What to check when a single file with its `other_parts` from elsewhere failed to load."""
        if config_dir:
            return (f"The {other_parts} and configs come from '{config_dir}'; check that it is a {cls.family_name} "
                    "diffusers folder and that the file is a checkpoint of that model.")
        return (f"The {other_parts} and configs come from the hub repo '{cls.default_config_repo}'; check your network "
                "and access token, or give a local diffusers folder as the config folder.")

    @classmethod
    def _single_file_transformer(cls, path: Path, config: str, hub: Mapping, dtype: torch.dtype):
        """The transformer of a single file in `dtype` (default: diffusers' `from_single_file`
        converter, with the transformer config of `config`); a .gguf file keeps its quantized
        Linear weights (diffusers' GGUF layers, computing in `dtype`)."""
        return cls._transformer_class().from_single_file(transformer_file_source(path, dtype), config=config, subfolder="transformer",
                                                         torch_dtype=dtype, **gguf_options(path, dtype), **hub)

    # ---------------------------------------------------------------- parts and options

    def configure_noise_schedule(self, *, prediction_type: str | None = None, zero_terminal_snr: bool = False) -> None:
        """Refused: the prediction type and the terminal SNR are the DDPM families' options."""
        if prediction_type:
            raise ValueError(f"force_v_prediction / force_epsilon_prediction: {self.family_name} is a flow-matching model "
                             "that predicts the velocity; turn these options off")
        if zero_terminal_snr:
            raise ValueError(f"rescale_noise_scheduler_to_zero_terminal_snr: {self.family_name} is a flow-matching model "
                             "(its last timestep is pure noise already); turn this option off")

    def configure_flow(self, config) -> None:
        """The run's flow options (token windows, guidance value) before training."""

    def set_attention(self, mechanism: str, device: torch.device | str | None = None) -> None:
        """SDP (PyTorch's scaled-dot-product attention; DEFAULT is the same here: these transformers
        have no classic processor), XFORMERS, FLASH or FLEX (PyTorch's FlexAttention; CUDA only,
        it has no backward pass on the CPU), diffusers' attention backends, on every transformer the family samples with (Wan 2.2 A14B's
        idle expert, Ideogram 4's unconditional one). A transformer whose processors call PyTorch's
        attention themselves (SD 3, HiDream) takes SDP only: another one is refused, not ignored."""
        mechanism = str(getattr(mechanism, "value", mechanism)).upper()
        transformers = [base_module(m) for m in self.attention_modules()]
        where = torch.device(device).type if device is not None else module_device(transformers[0]).type
        if mechanism in ("DEFAULT", "SDP"):
            backend = "native"
        elif mechanism in ("XFORMERS", "FLASH", "FLEX"):
            if not all(reaches_attention_backends(t) for t in transformers):
                raise ValueError(f"attention_mechanism: {mechanism} does not reach {self.family_name}'s attention (its attention "
                                 "processors call PyTorch's scaled-dot-product attention themselves, not diffusers' attention "
                                 "backends); use SDP")
            if where not in ("cuda", "meta"):  # (PyTorch's FlexAttention has no backward pass on the CPU)
                raise ValueError(f"attention_mechanism: {mechanism} needs a CUDA GPU; use SDP")
            # the memory planner's meta run counts a fused kernel (FLEX compiled, memory_probe.py)
            backend = {"XFORMERS": "xformers", "FLASH": "_native_flash", "FLEX": "flex"}[mechanism] if where != "meta" else "native"
        else:
            raise ValueError(f"attention_mechanism: unknown value {mechanism!r}; use SDP, DEFAULT, XFORMERS, FLASH or FLEX")
        for transformer in transformers:
            transformer.set_attention_backend(backend)

    def attention_modules(self) -> list[torch.nn.Module]:
        """The transformers whose attention `attention_mechanism` sets: the denoiser, and those
        that sample beside it."""
        others = (getattr(self, "idle_expert", None), getattr(self, "unconditional_transformer", None))
        return [self.transformer, *(m for m in others if m is not None)]

    def _check_layer_skip(self, part: str, skip: int) -> None:
        top = self._layer_skip_top(part)
        if not 0 <= skip <= top:
            raise ValueError(f"{part}_layer_skip: {skip} is out of range; this model's {part.replace('_', ' ')} allows 0 to {top}")

    def _layer_skip_top(self, part: str) -> int:
        """The largest skip of `part`: its layer count for the T5 part, one less for the others
        (which read their second-to-last layer, or their last with the final norm). A multimodal
        encoder's layers are its text model's."""
        config = base_module(getattr(self, part)).config
        config = getattr(config, "text_config", None) or config
        layers = int(getattr(config, "num_hidden_layers", None) or config.num_layers)
        return layers if part == self.t5_part else layers - 1

    # ---------------------------------------------------------------- images

    def image_seq_len(self, latents: torch.Tensor) -> int:
        """The transformer's image token count for these latents (the resolution-dependent shift)."""
        patch = self.patch_size or int(base_module(self.transformer).config.patch_size)
        return (latents.shape[-2] // patch) * (latents.shape[-1] // patch)

    # ---------------------------------------------------------------- training

    def t5_hidden_states(self, part: str, ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                         grad: bool = False) -> torch.Tensor:
        """The T5 part's hidden states for token `ids`; a layer skip takes an earlier layer with
        T5's final norm applied (OneTrainer's encode_t5). In a float16 run T5 runs at the fallback train
        type (`fp16_unstable`, training/fp16_fallback.py)."""
        encoder = getattr(self, part)
        device = module_device(encoder)
        mask = {} if attention_mask is None else {"attention_mask": attention_mask.to(device)}
        skip = self.layer_skips.get(part, 0)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            if skip <= 0:
                hidden = encoder(ids.to(device), **mask)[0]
            else:
                out = encoder(ids.to(device), output_hidden_states=True, **mask)
                hidden = base_module(encoder).encoder.final_layer_norm(out.hidden_states[-(skip + 1)])
            return self.output_embedded(part, ids, hidden)

    def padding_zeroed(self, hidden: torch.Tensor, mask: torch.Tensor, token_dim: int = 1) -> torch.Tensor:
        """`hidden` with its padding tokens' rows zeroed when `mask_padding_tokens` is on (OneTrainer's
        transformer.attention_mask: the encoder output times its token mask), else as it is.
        `mask` is the tokenizer's (B, tokens); `token_dim` is the token axis of `hidden`."""
        if not self.mask_padding_tokens:
            return hidden
        shape = [1] * hidden.ndim
        shape[0], shape[token_dim] = mask.shape
        return hidden * mask.to(hidden.device, hidden.dtype).view(shape)

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """The conditioning dict `predict` reads; gradients flow through the parts in `grad`."""
        raise NotImplementedError

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity `noise - latents` for noisy latents at noise fraction `t` (B,)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- sampling

    def pipeline(self):
        """The family's diffusers pipeline sharing this model's (possibly adapter-wrapped) parts."""
        components = {part: base_module(module) for part, module in self.parts.items()}
        components.update({attr: self.tokenizers[part] for part, attr in self.tokenizer_attrs.items()})
        components.update(left_out_of(self))  # text encoders left out of the run: None, as the pipeline takes them
        scheduler = type(self.scheduler).from_config(self.scheduler.config)
        pipe = self._pipeline_class()(scheduler=scheduler, **components, **self.pipeline_config)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """The prompt side of the pipeline call: our embeddings (so samples see the trained window
        and layer skips), the guidance value and, with CFG, the negative prompt's."""
        raise NotImplementedError

    def sample_options(self) -> dict:
        """Further keyword arguments of the pipeline call (token window, resolution binning)."""
        return {}

    def sampling_inputs(self, height: int, width: int, **inputs) -> dict:
        """Pipeline inputs besides the prompt, for an image of `height` x `width` (Flux Fill: the
        image and its mask); a text-to-image family takes none."""
        if inputs:
            raise ValueError(f"{self.model_type.value} samples from a prompt alone; it takes no {', '.join(sorted(inputs))}")
        return {}

    def decode_sample(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Pixels in [-1, 1] for the pipeline's latent output of an image of `height` x `width`."""
        return self.decode_latents(latents)

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, steps: int | None = None,
               cfg_scale: float | None = None, seed: int = 0, sampler: NoiseScheduler | str = NoiseScheduler.EULER,
               device: torch.device | str | None = None, **inputs):
        """One image (PIL) of exactly `width` x `height` (a video family: a clip, its frames as a
        list of such images), generated at the next multiple of
        `bucket_step` px with the model's own scheduler and shift (every sampler choice: the one
        these models ship with, as in OneTrainer); `steps` and `cfg_scale` default to the
        family's. Parts keep their mode and device. `inputs`: what `sampling_inputs` takes."""
        steps = self.default_steps if steps is None else steps
        cfg_scale = self.default_cfg_scale if cfg_scale is None else cfg_scale
        gen_h, gen_w = generation_size(height, width, self.bucket_step)
        with parked_for_sampling(self.parts, device, self.denoiser) as places, torch.no_grad():
            generator = torch.Generator(device="cpu").manual_seed(int(seed))
            prompt_inputs = self.pipeline_inputs(prompt, negative_prompt, cfg_scale)
            pipe = self.pipeline()
            places.release(self.text_encoder_names, pipe)  # encoded: the text encoders leave before the denoiser runs
            if int(steps) == 1 and getattr(pipe.scheduler.config, "shift_terminal", None):
                # one step's only sigma is 1: stretching the schedule to end at shift_terminal divides
                # 0 by 0 in diffusers' scheduler (Qwen-Image, LTX-2: a NaN, all-black image); the one step is 1 -> 0
                pipe.scheduler = type(pipe.scheduler).from_config(pipe.scheduler.config, shift_terminal=None)
            latents = pipe(
                **prompt_inputs, **self.sampling_inputs(gen_h, gen_w, **inputs),
                height=gen_h, width=gen_w, num_inference_steps=int(steps), generator=generator, output_type="latent",
                **self.sample_options(),
            )
            latents = getattr(latents, self.pipeline_output)
            pixels = self.decode_sample(latents, gen_h, gen_w).float()
        from diffusers.image_processor import VaeImageProcessor

        processor = VaeImageProcessor(vae_scale_factor=self.vae_scale_factor)
        if pixels.ndim == 5:  # a video family's clip (B, 3, F, H, W): its frames, in order
            return [exact_size(frame, width, height) for frame in processor.postprocess(pixels[0].transpose(0, 1).cpu(), output_type="pil")]
        return exact_size(processor.postprocess(pixels.cpu(), output_type="pil")[0], width, height)

    # ---------------------------------------------------------------- saving

    def transformer_file_contents(self, dtype, architecture: str, metadata=None) -> tuple[dict, torch.dtype, dict]:
        """What a transformer file is written from: the transformer's weights (no part may still
        hold LoRA layers), the dtype to store them in and the file's header."""
        self.check_plain_parts()
        return plain_state_dict(self.transformer, "transformer"), torch_dtype(dtype), self.file_metadata(architecture, metadata)

    @property
    def saved_parts(self) -> dict[str, torch.nn.Module]:
        """The modules a diffusers folder holds: the parts (Ideogram 4 adds its frozen unconditional transformer)."""
        return self.parts

    def save_diffusers(self, directory: str | os.PathLike, dtype: DataType | torch.dtype | None) -> Path:
        """A diffusers folder (the pipeline's from_pretrained loads it), written atomically."""

        def write_rest(tmp: Path) -> None:
            for part, attr in self.tokenizer_attrs.items():
                self.tokenizers[part].save_pretrained(tmp / attr)
            self.scheduler.save_pretrained(tmp / "scheduler")
            self.save_other_files(tmp)
            self.pipeline().save_config(tmp)

        return save_diffusers_folder(directory, self.saved_parts, dtype, write_rest)

    def save_other_files(self, folder: Path) -> None:
        """What else a diffusers folder of the family holds besides its parts, tokenizers and
        scheduler (Qwen-Image-Edit's processor)."""

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The model as one file; refused unless the family writes a single-file layout."""
        raise ValueError(f"output_model_format: {self.family_name} is saved as a diffusers folder here (DIFFUSERS); "
                         "no single-file layout is written")


class TokenWindow:
    """`text_encoder_sequence_length` for one-encoder families: the token window (blank: the
    family's `default_sequence_length`); the tokenizer's model_max_length follows it, so cached
    text embeddings are keyed by it."""

    default_sequence_length = 512

    @property
    def text_encoder_sequence_length(self) -> int:
        return self._sequence_length

    @text_encoder_sequence_length.setter
    def text_encoder_sequence_length(self, length: int | None) -> None:
        self._sequence_length = int(length or self.default_sequence_length)
        getattr(self.tokenizer, "tokenizer", self.tokenizer).model_max_length = self._sequence_length
