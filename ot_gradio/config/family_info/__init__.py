"""The torch-free description of each model family: one module here per family module in
ot_gradio/models (the same file name), holding `FAMILIES = {ModelType: FamilyInfo(...)}` and,
where the family is the one people name, `SIGN = Sign(...)` (or a tuple of them) for the base-model check.

Why here and not beside the family module in models/: the config layer is the lowest one and
imports nothing above it, yet config/families.py, the doctor and the page read these facts
without loading torch. So the descriptions live at the bottom, and the family classes read them
downwards: `models.registry.register_family` gives each class the facts of its description
(denoiser, text encoders, parts, bucket step, schedule, inpainting), so a fact is written once.

A new family: its module in models/, its description here, its preset and one line in a
parametrized test. Nothing else lists the families: `collect()` finds every module here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..enums import ModelType as M
from ..enums import TrainingMethod as T

ALL_METHODS = (T.LORA, T.FINE_TUNE, T.EMBEDDING)
# the attention_mechanism values that reach a denoiser's attention (models/attention.py): diffusers'
# classic processors; processors that call diffusers' attention backends (also FLEX); processors
# that call PyTorch's attention themselves (SD 3, HiDream, Sana's linear attention: DEFAULT is SDP there)
CLASSIC_ATTENTION = ("SDP", "DEFAULT", "XFORMERS", "FLASH")
BACKEND_ATTENTION = (*CLASSIC_ATTENTION, "FLEX")
SDP_ATTENTION = ("SDP", "DEFAULT")


@dataclass(frozen=True)
class FamilyInfo:
    parts: tuple[str, ...]          # every config part section the family uses, denoiser first
    denoiser: str                   # the part that predicts noise
    text_encoders: tuple[str, ...]  # text encoder parts, in order
    methods: tuple[T, ...] = ALL_METHODS
    implemented: bool = False       # the trainer can train it today
    inpainting: bool = False        # the denoiser takes the masked image and the mask as input
    # each training image has its source image beside it (`cat.png` + `cat-control.png`) that the
    # model is conditioned on (image editing: Qwen-Image-Edit); images without one are skipped
    control_image: bool = False
    # an image may have its depth map beside it (`cat.png` + `cat-depth.png`, grey, white = near),
    # which the model is conditioned on instead of its depth estimator's (SD 2 depth)
    depth_maps: bool = False
    # image-to-video: the denoiser reads each clip's first frame (its latents and a mask beside the
    # noisy ones), and a sample starts from an image (samples[].control_image; blank: the first
    # frame of the first training clip)
    image_to_video: bool = False
    # text and image to video with one model (Wan 2.2 TI2V 5B, LTX-2): samples from a prompt alone or,
    # given a control image, from that image; trains image-to-video on `image_to_video_share` of its clips
    text_image_to_video: bool = False
    bucket_step: int | None = None  # image sizes must be multiples of this (None: the data default)
    # the px OneTrainer rounds its aspect buckets' sides to (the aspect_bucketing_quantization of the family's
    # modules/dataLoader/*BaseDataLoader.py): 64 in SDXL's, SD 3's, Flux's, Chroma's, Qwen's, Z-Image's, HiDream's,
    # HunyuanVideo's and every later loader's (and for families OneTrainer has not: Wan, LTX-2); data/buckets.py
    bucket_quantization: int = 64
    frame_step: int | None = None   # a video family: clips train with frame_step * k + 1 frames (None: images only)
    schedule: str = "ddpm"          # the training objective: "ddpm" or "flow_matching" (training/schedules.py)
    learns_variance: bool = False   # the denoiser also predicts its variance, trained with the VB loss (PixArt)
    # transformer.attention_mask and a sample's transformer_attention_mask zero the prompt embeddings of
    # padding tokens (OneTrainer reads them for Flux.1 (and Fill), SD 3 / 3.5 and HiDream only)
    zeroes_padding: bool = False
    transformer_file: bool = False  # a fine-tune's single file is the transformer alone (ORIGINAL_TRANSFORMER / COMFY_TRANSFORMER)
    single_file: bool = True  # a fine-tune may be written as one file; False: a diffusers folder only (DIFFUSERS)
    # each text encoder may load from a .safetensors file of its own (text_encoder*.model_name:
    # ComfyUI's and kohya's clip_l / t5xxl files), read with the base model's config (models/text_encoder_file.py);
    # a VAE file (vae.model_name) then goes into the pipeline's loader with them, so no part of a file is fetched
    text_encoder_files: bool = False
    # the transformer loads from a .gguf transformer.model_name (weight_dtype GGUF) into diffusers'
    # GGUF layers (through diffusers' single-file loader, or the family's own key converter: Flux.1,
    # Chroma), as OneTrainer reads it for this family
    gguf: bool = False
    # (LoRA file layout "kohya" / "diffusers", part, why): parts no reader loads from such a file
    # (refused); a diffusers-layout text encoder of a family with a diffusers LoRA loader is
    # decided by `diffusers_lora` instead
    lora_unread: tuple[tuple[str, str, str], ...] = ()
    # (pipeline, text encoders): the text encoders the family's diffusers pipeline loads a LoRA
    # into (its LoraLoaderMixin's `_lora_loadable_modules`, diffusers 0.42); None: the pipeline
    # has no load_lora_weights. A DIFFUSERS_LORA file of another text encoder is refused before the run
    diffusers_lora: tuple[str, tuple[str, ...]] | None = None
    # (denoiser layers ComfyUI does not map from a diffusers-layout LoRA, the layer presets that
    # train them): such a file is warned about (scripts/check_comfyui_lora.py measures it)
    comfy_gap: tuple[str, tuple[str, ...]] | None = None
    # KOHYA_LORA / COMFY_LORA write q, k and v as one layer on the original fused qkv (training/lora_fusion.py):
    # plain LoRA only (another adapter is refused before the run for those formats)
    lora_fused_qkv: bool = False
    # why a KOHYA_LORA / COMFY_LORA file of the family loads in no other program ("": it loads): warned about
    kohya_unread: str = ""
    # the key layout a LoRA saved as SAFETENSORS has (DIFFUSERS_LORA is always "diffusers"): "kohya" where
    # every program that loads the family's LoRAs reads kohya keys whole and some read no other (SD 1.x/2.x,
    # SDXL: A1111 and Forge read kohya keys only, ComfyUI skips a diffusers-layout UNet's attention), as
    # OneTrainer's SAFETENSORS LoRA of these families is kohya-named
    safetensors_lora: str = "diffusers"
    text_encoder_labels: tuple[str, ...] = ()  # what the text encoders are, for messages ("CLIP-L", "T5")
    # the family's name in messages ("Qwen-Image"), its hub repo (the example messages give, and the
    # configs a single file is read with) and kohya's ss_base_model_version in its LoRA files ("qwen_image");
    # "": the family class states them (SD 1.x/2.x, SDXL, Stable Cascade: computed or from a base class)
    name: str = ""
    hub_repo: str = ""
    lora_version: str = ""
    # the preset in presets/ to start from (a LoRA at the family's native size; the guide names it
    # with the note, what to know before using it; tests/ui/test_guide.py checks it sets this model type)
    preset: str = ""
    preset_note: str = ""
    # parameters per part at the published size (the Model tab's memory table; shared sizes in _sizes.py)
    params: Mapping[str, int] = field(default_factory=dict, hash=False)
    # parts whose convolutions pad circularly with force_circular_padding, so samples tile (OneTrainer's
    # model setups); (): the option is refused for the family
    circular_padding: tuple[str, ...] = ()
    # frozen modules loaded beside the parts, not config parts: name -> (the part whose weight type
    # they load in (a quantized part's: its compute type, they are not quantized), parameters,
    # where they wait while the steps run: "device" beside the parts or "RAM")
    extra_params: Mapping[str, tuple[str, int, str]] = field(default_factory=dict, hash=False)
    # the parts OneTrainer's part switch `include` may leave out, not loaded: the text encoders of SD 3 / 3.5,
    # Flux.1 and Fill, HiDream and HunyuanVideo (their outputs zeros, models/excluded_parts.py) and Ideogram 4's
    # unconditional transformer (samples' negative branch: the empty prompt, models/ideogram4.py)
    includable: tuple[str, ...] = ()
    attention: tuple[str, ...] = CLASSIC_ATTENTION  # the attention_mechanism values that reach the denoiser
    # the tokens text_encoder_sequence_length means when blank (the family's pipeline's window);
    # None: the family reads no such window (CLIP's 77, or a window of its own option)
    token_window: int | None = None

    @property
    def reads_sample_image(self) -> bool:
        """A sample may name an image it edits or starts from (samples[].control_image)."""
        return self.control_image or self.image_to_video or self.text_image_to_video


def flow_transformer(pipeline: str, *, comfy_model: bool = True, **facts) -> FamilyInfo:
    """The description of a flow-matching family with one transformer, one text encoder and a VAE,
    trained by LORA and FINE_TUNE, whose transformer also loads from its own file or a GGUF, in
    sizes of 16 px, and whose diffusers `pipeline` loads a LoRA into the transformer only (Qwen-Image,
    Z-Image, Krea 2, ERNIE-Image, Wan, ...): `facts` are what the family changes or adds.
    `comfy_model=False`: ComfyUI has no model of the family (its October 2025 source), so no key
    map, and the pipeline reads DIFFUSERS_LORA only: a kohya-layout file of the transformer is refused."""
    common = dict(parts=("transformer", "text_encoder", "vae"), denoiser="transformer", text_encoders=("text_encoder",),
                  methods=(T.LORA, T.FINE_TUNE), implemented=True, transformer_file=True, gguf=True, bucket_step=16,
                  schedule="flow_matching", diffusers_lora=(pipeline, ()), attention=BACKEND_ATTENTION)
    if not comfy_model:
        model = facts["name"]
        common["lora_unread"] = (("kohya", "transformer", f"ComfyUI has no {model} model to map its names to and diffusers "
                                  f"reads no kohya {model} file ({pipeline}.load_lora_weights reads DIFFUSERS_LORA)"),)
    return FamilyInfo(**(common | facts))


@dataclass(frozen=True)
class Sign:
    """How a base model shows its family (config/base_model_match.py): the family as people call
    it, its model types, the prefixes of its diffusers pipeline class names (model_index.json's
    `_class_name`) and words in a file or hub name."""

    name: str
    model_types: tuple[M, ...]
    class_prefixes: tuple[str, ...]
    name_words: tuple[str, ...]


def _modules():
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{__name__}.{info.name}")


def collect() -> tuple[dict[M, FamilyInfo], tuple[Sign, ...]]:
    """Every description module's families (in ModelType order) and signs; a model type
    described twice is an error naming both modules."""
    families: dict[M, FamilyInfo] = {}
    owner: dict[M, str] = {}
    signs: list[Sign] = []
    for module in _modules():
        for model_type, info in getattr(module, "FAMILIES", {}).items():
            if model_type in owner:
                raise ValueError(f"{model_type.value} is described in both {owner[model_type]} and {module.__name__}.")
            families[model_type], owner[model_type] = info, module.__name__
        sign = getattr(module, "SIGN", None)  # one Sign, or a tuple of them (Wan's text- and image-to-video)
        signs.extend(sign if isinstance(sign, tuple) else () if sign is None else (sign,))
    return {m: families[m] for m in M if m in families}, tuple(signs)
