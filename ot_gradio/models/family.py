"""The root of every model family class: the facts the trainer, the methods and the tools read,
each declared once with its default, so they read `model.fact` instead of probing with getattr.

The full interface is described in models/base.py; the flow-matching families share their code
in models/flow_family.FlowFamily, the DDPM ones in sd15.StableDiffusion15, pixart.PixArtAlpha and
cascade_common.CascadeFamily, all of which derive from this class.
"""

from __future__ import annotations

from typing import Any


class Family:
    """Defaults of the family interface: a plain text-to-image model without extras."""

    # what the description gives (config/family_info; set by models.registry.register_family)
    part_names: tuple[str, ...] = ()  # every part by its config section name, denoiser first
    denoiser = "unet"  # the part that predicts noise
    text_encoder_names: tuple[str, ...] = ("text_encoder",)
    # text encoders left out of this run (include: false; models/excluded_parts.py): held as None and
    # missing from part_names, text_encoder_names and tokenizer_attrs of the instance
    excluded_parts: frozenset[str] = frozenset()
    tokenizer_attrs: dict[str, str] = {"text_encoder": "tokenizer"}  # text encoder part -> its tokenizer attribute
    text_encoder_files = False  # each text encoder may load from a .safetensors file of its own (text_encoder*.model_name)
    inpainting = False  # the denoiser takes the masked image and the mask as input (sd_inpainting.py, Flux Fill)
    control_image = False  # trains on (image, `-control` image) pairs; the batch's control_pixels reach encode_text (Qwen-Image-Edit)
    depth_maps = False  # a `-depth` image beside an image is its depth map (SD 2 depth); from the description
    image_to_video = False  # the denoiser reads each clip's first frame; a sample starts from an image (Wan 2.2 I2V)
    # the fraction of training clips that start from their own first frame, given clean (Wan 2.2 TI2V 5B's
    # and LTX-2's `image_to_video_share`, set per run; models/start_frame.py, training/first_frame.py); 0: none
    image_to_video_share = 0.0
    learns_variance = False  # the denoiser also predicts its variance, trained with the variational bound (PixArt)
    bucket_step: int | None = None  # image sides are multiples of this (None: the data default)
    frame_step: int | None = None  # a video family: clips train with frame_step * k + 1 frames (None: images only)
    # the noise fractions t a flow family trains, [low, high) (Wan 2.2 A14B: its trained expert's range)
    timestep_range: tuple[float, float] = (0.0, 1.0)
    embedding_keys: dict[str, str] = {}  # text encoder part -> key in an embedding file ({}: no embeddings)
    # the text encoder parts whose output sequence the prompt embedding is made of: encode_text
    # passes it through `output_embedded`, where output embeddings replace their tokens' rows
    # (a part only pooled, as Flux's CLIP-L, is not one: there an output embedding is its initial text)
    output_embedding_parts: tuple[str, ...] = ()
    # parts that overflow in float16: while training in float16 they run at fallback_train_dtype
    # (training/fp16_fallback.py), as OneTrainer's setups run them
    fp16_unstable: tuple[str, ...] = ()
    # set per run by training/embeddings.Embeddings: (part, input ids, hidden) -> hidden
    output_embeddings: Any = None
    lora_layer_presets: dict[str, dict[str, list[str]]] = {}  # part -> OneTrainer's layer presets ({}: SD's names)
    lora_base_model_version = "sd_v1"  # LoRA metadata, and the kohya prefixes
    modelspec_architecture: str | None = None  # the single file's modelspec.architecture (None: by model type)
    transformer_file = False  # save_single_file writes the transformer alone (ORIGINAL_TRANSFORMER); from the description
    # the T5 / LLM token window, set per run from the config (None: the family's default); families
    # without such an encoder never read it
    text_encoder_sequence_length: int | None = None
    # transformer.attention_mask (OneTrainer's): the prompt embeddings of padding tokens are zeroed,
    # set per run from the config and per sample by its transformer_attention_mask; the families
    # OneTrainer does it for read it (Flux.1, SD 3, HiDream: the description's `masks_padding_tokens`)
    mask_padding_tokens = False
    # modules of the text side besides the text encoder parts (Anima's LLM adapter): their weights key the text cache
    text_cache_modules: tuple[Any, ...] = ()
    # what `encode_conditioning` makes, as the latent cache keys it: "masked_image" (inpainting) or "depth"
    conditioning_kind = "masked_image"
    # debug_mode decodes a step's latents with `decode_latents` (training/debug_output.py); False
    # where that is a diffusion model rather than a VAE (Würstchen, Stable Cascade)
    decodes_latents = True
    # frozen modules that are not config parts but stay on the device with the parts (LTX-2's text
    # connectors): the memory plan counts their weights (the description's extra_params, "device")
    resident_modules: tuple[str, ...] = ()

    def output_embedded(self, part: str, input_ids: Any, hidden: Any) -> Any:
        """A text encoder's output sequence (B, tokens, width) for `input_ids` (B, tokens), the
        output embeddings' rows put in (training/output_embeddings.py); as it is without them."""
        return hidden if self.output_embeddings is None else self.output_embeddings(part, input_ids, hidden)

    @property
    def resident(self) -> dict[str, Any]:
        """The parts and the resident modules: every weight on the device while the steps run."""
        return {**self.parts, **{name: getattr(self, name) for name in self.resident_modules}}

    def caches_conditioning(self, masked_training: bool) -> bool:
        """Whether the latent cache holds `encode_conditioning`'s output too: an inpainting model's
        masked images with masked training (a depth model: every image's depth map)."""
        return self.inpainting and masked_training

    def check_plain_parts(self) -> None:
        """A ValueError where a part still holds LoRA layers: full models are saved without them."""
        from ot_gradio.models.common import plain_state_dict

        for name, module in self.parts.items():
            plain_state_dict(module, name)

    def file_metadata(self, architecture: str | None, metadata: dict[str, str] | None = None) -> dict[str, str]:
        """A saved model file's header: its modelspec architecture, the model type, then `metadata`."""
        return {"modelspec.architecture": architecture, "ot_gradio.model_type": self.model_type.value, **(metadata or {})}

    def resolution_shift(self, latents: Any) -> float | None:
        """The shift e^mu of `dynamic_timestep_shifting` for these latents where the family has a
        rule of its own (Ideogram 4's); None: the scheduler config's rule (training/flow_matching.py)."""
        return None

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Part -> {module path: the name kohya files use}: renames for kohya LoRA keys ({}: none)."""
        return {}

    @property
    def parts(self) -> dict[str, Any]:
        """Part name -> its torch module (denoiser, text encoders, VAE): the attribute of each part name."""
        return {part: getattr(self, part) for part in self.part_names}

    def to(self, device: Any):
        """Moves every part to `device` (families that keep some parts elsewhere override it)."""
        for module in self.parts.values():
            module.to(device)
        return self

    @property
    def tokenizers(self) -> dict[str, Any]:
        """The tokenizer of each text encoder part (the live objects training and sampling use)."""
        return {part: getattr(self, attr) for part, attr in self.tokenizer_attrs.items()}
