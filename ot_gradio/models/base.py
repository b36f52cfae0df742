"""The interface of a model family, as the trainer, the methods and the tools use it.

A family is one class in one module of this package, registered with
`@register_family(ModelType...)`, which gives it the parts, denoiser, text encoders, bucket
step, schedule and inpainting flag of its torch-free description (config/family_info). The trainer
never names a family; everything it does goes through these members.

The flow-matching families (Flux.1, Flux Fill, Chroma, SD 3 / 3.5, Z-Image, Flux.2, Sana) subclass
`flow_family.FlowFamily`, this interface as a class: it declares the class attributes and the
per-family hooks with their docstrings and holds what they share (loading and its errors, parts,
attention, layer skips, the VAE side, sampling with the parts parked and restored, saving). A new
flow family sets the attributes and writes `encode_text`, `predict`, `configure_flow` and
`pipeline_inputs`. Every family class derives from `family.Family`, which declares the optional
facts with their defaults (inpainting, learns_variance, bucket_step, embedding keys, LoRA layer
presets and kohya names, modelspec architecture), so the trainer reads them without probing.
What several families share comes as mixins from `family_parts.py` (loading guards, the KL VAE's
latents, the DDPM noise schedule and targets). The DDPM families (SD 1.5/2/XL, PixArt,
Würstchen, Cascade) also have the members listed after the class, which also says where the
flow families differ.

`ModelFamily` below is the contract as a `typing.Protocol`: the trainer and its RunState
(training/run_state.py) type their `model` with it, and tests/models/test_model_registry.py checks that every registered
family class has each of its members and that its `load` takes each keyword.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image


class ModelFamily(Protocol):
    """One loaded model of a family (the class attributes are the family's facts)."""

    model_type: ClassVar[Any]  # the ModelType it is registered for
    denoiser: ClassVar[str]  # the part that predicts noise: "unet", "prior", "transformer"
    text_encoder_names: ClassVar[tuple[str, ...]]  # text encoder parts in order
    inpainting: ClassVar[bool]  # then also `encode_conditioning(pixels, mask)` and `batch.latent_mask` in `predict`
    depth_maps: ClassVar[bool]  # a `-depth` image beside an image is its depth map (the batch's depth_maps, `encode_conditioning`)
    image_to_video: ClassVar[bool]  # `encode_conditioning(pixels)`: a clip's first frame, read beside the noisy latents
    control_image: ClassVar[bool]  # trains on (image, `-control` image) pairs: `encode_text(..., control=)` reads them (Qwen-Image-Edit)
    conditioning_kind: ClassVar[str]  # what `encode_conditioning` makes for the latent cache ("masked_image", "depth")
    decodes_latents: ClassVar[bool]  # `decode_latents` is a VAE's (debug_mode decodes each step's latents with it)
    learns_variance: ClassVar[bool]
    bucket_step: ClassVar[int | None]  # image sides are multiples of this (None: the data default)
    transformer_file: ClassVar[bool]  # `save_single_file` writes the transformer alone
    gguf_transformer: ClassVar[bool]  # a .gguf transformer.model_name loads (weight_dtype GGUF)
    embedding_keys: ClassVar[dict[str, str]]  # text encoder part -> its key in an A1111 embedding file
    lora_layer_presets: ClassVar[dict[str, dict[str, list[str]]]]
    lora_base_model_version: ClassVar[str]  # LoRA metadata ("sd_v1", "sdxl_base_v1-0"); picks kohya prefixes
    modelspec_architecture: ClassVar[str | None]

    # set per run by the trainer (training/diffusion.configure_model); used in training and sampling
    layer_skips: dict[str, int]  # clip skip per text encoder part
    text_encoder_sequence_length: int | None  # the T5 / LLM token window (None: the family's default)
    text_cache_modules: tuple[Any, ...]  # text-side modules besides the text encoders (keys of the text cache)

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             dtypes: Mapping[str, torch.dtype] | None = None, config_dir: str | None = None,
             part_models: Mapping[str, str] | None = None) -> ModelFamily:
        """A hub id, a local diffusers folder, a single file, or `tiny:<family>`. `dtypes`: part ->
        torch dtype; `config_dir`: the configs of a single file; `part_models`: part -> the model a
        part comes from (families that read it: Würstchen, Stable Cascade). Errors the user can fix
        raise `ModelLoadError` saying what to do."""
        ...

    @property
    def parts(self) -> dict[str, torch.nn.Module]:
        """Every part by its config section name."""
        ...

    @property
    def tokenizers(self) -> dict[str, Any]:
        """The tokenizer of each text encoder part: the live objects training and sampling use
        (embeddings add their tokens to them)."""
        ...

    def to(self, device: Any) -> ModelFamily: ...

    @property
    def prediction_type(self) -> str:
        """"epsilon", "v_prediction" or "flow"."""
        ...

    def set_attention(self, mechanism: str, device: Any = None) -> None: ...

    @property
    def vae_id(self) -> str:
        """The identity of the image encoder, for the latent cache."""
        ...

    def encode_images(self, pixels: torch.Tensor, sample: bool = True, generator: torch.Generator | None = None) -> torch.Tensor: ...

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor: ...

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] = frozenset()) -> dict:
        """The conditioning; gradients flow through the text encoders named in `grad` only.
        Several text encoders: also {part: captions} (the step drops captions per encoder)."""
        ...

    def predict(self, noisy: torch.Tensor, timesteps: torch.Tensor, conditioning: dict, batch: Any = None) -> torch.Tensor:
        """The denoiser's output for the target (DDPM: integer timesteps; flow: t in (0, 1), the velocity)."""
        ...

    def sample(self, prompt: str, negative_prompt: str, height: int, width: int, steps: int, cfg_scale: float,
               seed: int, sampler: Any, device: Any, **images: Any) -> Image: ...

    def save_single_file(self, path: str | Path, dtype: Any, metadata: Mapping[str, str] | None = None) -> Path:
        """The whole model (or the transformer alone, `transformer_file`), the header keys merged in."""
        ...

    def save_diffusers(self, directory: str | Path, dtype: Any) -> Path:
        """A diffusers folder, written atomically."""
        ...


# What the DDPM families (sd15.StableDiffusion15 is their reference) have besides the members above,
# and where the flow families differ (flow_family.FlowFamily):
#
# - `noise_scheduler` (DDPM): `config.num_train_timesteps`, `alphas_cumprod`, `betas`; integer
#   timesteps in [0, num_train_timesteps) are what the trainer samples and passes on;
#   `configure_noise_schedule(prediction_type=, zero_terminal_snr=)`, `add_noise(latents, noise,
#   timesteps)`, `prediction_target(latents, noise, timesteps)`.
# - flow families: `schedule_kind = "flow_matching"`, options in `configure_flow(config)`
#   (`configure_noise_schedule` refuses the DDPM-only ones); training/flow_matching.py draws t and
#   makes the noisy input and the target.
# - embeddings (training/embeddings.py): every text encoder has transformers'
#   `get_input_embeddings()` / `set_input_embeddings()` and looks its input ids up through that
#   module, in training and in `sample`; `embedding_keys` {} means no embeddings. Output embeddings:
#   `encode_text` passes the output sequence of each part in `output_embedding_parts` (after the
#   clip-skip layer and final norm) through `output_embedded(part, input_ids, hidden)` (family.py).
