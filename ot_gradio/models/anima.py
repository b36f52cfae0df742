"""Anima: load, encode, predict, sample, save (a flow-matching family on the shared core in
training/flow_matching.py; this module maps t to the transformer and the prompts to its text).

What Anima is (diffusers' modular AnimaAutoBlocks / AnimaModularPipeline, OneTrainer's ANIMA):
- One text encoder, Qwen3 0.6B (`text_encoder`, a transformers Qwen3Model), read through the LLM
  adapter `text_conditioner` (diffusers' AnimaTextConditioner), which travels with it: each
  prompt is tokenized twice, as it is (no template) by the Qwen2 tokenizer and by a T5 tokenizer
  (`t5_tokenizer`), both padded to the batch's longest prompt and cut at
  `text_encoder_sequence_length` (blank and at most 512, the pipeline's `max_sequence_length`);
  Qwen3's last hidden state, zero past each prompt, is what the adapter cross-attends to, with
  the T5 token embeddings as queries. Its output, zero past each prompt's T5 tokens and padded to
  512 tokens, is the transformer's `encoder_hidden_states` (no text mask: the padding's zeros
  count, so the length is the pipeline's). `encode_text` returns it, so the text cache holds it.
  The adapter is frozen (OneTrainer trains the transformer only, and no layer skip: the pipeline
  reads the last layer).
- The VAE is Qwen-Image's AutoencoderKLQwenImage, one frame at a time (flow_family.WanImageLatents).
- CosmosTransformer3DModel (Cosmos-Predict2 2B DiT) reads latents (B, C, 1, H, W), the timestep
  t in [0, 1] itself (the pipeline's t / 1000) and an all-zero padding mask of the image's pixel
  size, and predicts the velocity `noise - latents` directly.
- The scheduler is FlowMatchEuler at the repo's shift; the core reads its config. Sampling runs
  diffusers' own Anima blocks after the text step (input, latents, timesteps, denoise loop with
  its CFG guider) on our conditioning.
- Loading: a hub id, a folder in the repo's modular layout (`modular_model_index.json`), the original
  checkpoint (`net.` keys, diffusers' Cosmos converter; the other parts from a config folder), or
  `tiny:anima`; each part from its subfolder, as OneTrainer reads them. Saving: LoRA files (diffusers
  keys for AnimaModularPipeline's load_lora_weights; kohya keys on the DiT names ComfyUI uses), or a
  folder in the same modular layout, or the original checkpoint (ORIGINAL_TRANSFORMER, as OneTrainer writes it).
- diffusers' Cosmos transformer resizes the padding mask with torchvision, which this install has
  not: `torchvision_free_cosmos` gives it the same nearest-neighbour resize in torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import (
    QWEN_PRESETS,
    ModelLoadError,
    base_module,
    compute_dtype,
    input_dtype,
    module_device,
    save_diffusers_folder,
)
from ot_gradio.models.flow_family import FlowFamily, WanImageLatents
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family
from ot_gradio.models.text_encoder_file import parts_from_files
from ot_gradio.models.weight_variants import part_keywords

MAX_SEQUENCE_LENGTH = 512  # the pipeline's max_sequence_length and the adapter's min_sequence_length
# OneTrainer's BaseAnimaSetup layer presets (CosmosTransformerBlock: attn1 self, attn2 cross, ff)
TRANSFORMER_PRESETS = {"full": [], "attn-mlp": ["attn1", "attn2", "ff"], "attn-only": ["attn1", "attn2"], "blocks": ["transformer_block"]}
# the DiT's names of the transformer's norms (its linear layers: models/comfy_lora_names.anima_original)
DIT_NORMS = {"attn1.norm_q": "self_attn.q_norm", "attn1.norm_k": "self_attn.k_norm", "attn2.norm_q": "cross_attn.q_norm",
             "attn2.norm_k": "cross_attn.k_norm"}
# what the pipeline runs after its text step (AnimaCoreDenoiseStep without text_conditioning)
DENOISE_BLOCKS = ("input", "prepare_latents", "set_timesteps", "denoise")


def torchvision_free_cosmos() -> None:
    """Without torchvision, diffusers' Cosmos transformer cannot resize its padding mask (it calls
    torchvision's `resize(..., NEAREST)`, which is torch's nearest interpolation): that resize in
    torch, put where the module looks for it. Nothing changes where torchvision is installed."""
    from diffusers.models.transformers import transformer_cosmos

    if hasattr(transformer_cosmos, "transforms"):
        return

    def resize(tensor: torch.Tensor, size, interpolation=None) -> torch.Tensor:
        return torch.nn.functional.interpolate(tensor, size=tuple(size), mode="nearest")

    transformer_cosmos.transforms = SimpleNamespace(functional=SimpleNamespace(resize=resize),
                                                    InterpolationMode=SimpleNamespace(NEAREST="nearest"))


class AnimaPipeline:
    """diffusers' AnimaModularPipeline (AnimaAutoBlocks) holding the model's parts: its LoRA
    loader, components and attributes are the pipeline's. Called like a pipeline with our
    conditioning (`prompt_embeds`, `negative_prompt_embeds`, `guidance_scale`), it runs the
    pipeline's blocks after its text step (they read no prompt) and returns latents (B, C, 1, H, W)."""

    def __init__(self, components: Mapping):
        from diffusers import AnimaAutoBlocks

        self.full = AnimaAutoBlocks().init_pipeline()
        self.full.update_components(**components)
        self.full.set_progress_bar_config(disable=True)
        self.released: set[str] = set()

    def __getattr__(self, name: str):
        if name in self.__dict__.get("released", ()):
            return None
        return getattr(self.__dict__["full"], name)

    def register_modules(self, **modules) -> None:
        """Parts set to None leave: the denoising blocks never read the text parts."""
        self.released.update(name for name, module in modules.items() if module is None)

    def __call__(self, *, guidance_scale: float, output_type: str = "latent", **inputs):
        from diffusers import ClassifierFreeGuidance
        from diffusers.modular_pipelines.anima.modular_blocks_anima import AnimaCoreDenoiseStep
        from diffusers.modular_pipelines.modular_pipeline import SequentialPipelineBlocks

        core = AnimaCoreDenoiseStep()
        denoise = SequentialPipelineBlocks.from_blocks_dict({name: core.sub_blocks[name] for name in DENOISE_BLOCKS}).init_pipeline()
        denoise.update_components(transformer=self.full.transformer, scheduler=self.full.scheduler,
                                  guider=ClassifierFreeGuidance(guidance_scale=float(guidance_scale)))
        denoise.vae = self.full.vae  # not a component of these blocks, but their latent size reads it (without: 8 px a latent)
        denoise.set_progress_bar_config(disable=True)
        return SimpleNamespace(images=denoise(**inputs, output="latents"))


@register_family(ModelType.ANIMA)
class Anima(WanImageLatents, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Anima."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    text_encoder_description = "its Qwen3 text encoder, LLM adapter (text_conditioner) and T5 tokenizer"
    comfy_lora_names = "anima"  # KOHYA_LORA: the DiT's names, as OneTrainer and ComfyUI (models/comfy_lora_names.py)
    single_file_layout = "original"  # that file, through diffusers' Cosmos converter (its llm_adapter: the config folder's)
    folder_index = "modular_model_index.json"
    folder_parts = ("transformer", "text_encoder", "text_conditioner", "tokenizer", "t5_tokenizer", "vae", "scheduler")
    pipeline_class_name = "AnimaModularPipeline"
    transformer_class_name = "CosmosTransformer3DModel"
    default_steps, default_cfg_scale = 30, 4.0

    def __init__(self, components: Mapping):
        for name in ("text_conditioner", "t5_tokenizer"):
            if components.get(name) is None:
                raise ModelLoadError(f"The model has no {name}; Anima needs {self.text_encoder_description}. Pick a complete model.")
        self.t5_tokenizer = components["t5_tokenizer"]
        super().__init__(components)
        self.text_conditioner = components["text_conditioner"].requires_grad_(False).eval()
        torchvision_free_cosmos()

    # ---------------------------------------------------------------- loading

    @classmethod
    def _part_classes(cls) -> dict:
        """Each loaded part's class, by subfolder (the repo's modular_model_index.json is not read)."""
        import transformers
        from diffusers import AnimaTextConditioner, AutoencoderKLQwenImage, CosmosTransformer3DModel

        return {"transformer": CosmosTransformer3DModel, "text_encoder": transformers.Qwen3Model,
                "text_conditioner": AnimaTextConditioner, "vae": AutoencoderKLQwenImage}

    @classmethod
    def _parts_from_files(cls, files: Mapping[str, Path], source: str | Path, hub: Mapping, dtype) -> dict:
        """ComfyUI's qwen_3_06b_base.safetensors (and a VAE file), with the classes of `_part_classes`."""
        classes = {part: (model_class.__module__.split(".")[0], model_class.__name__) for part, model_class in cls._part_classes().items()}
        return parts_from_files(files, source, hub, dtype, classes=classes)

    @classmethod
    def _pipeline_from(cls, source: str | Path, dtype, hub: Mapping, **parts):
        """Each part from its subfolder of `source` (OneTrainer's loader; the repo's
        modular_model_index.json names the hub repo, not the folder it lies in)."""
        import transformers
        from diffusers import FlowMatchEulerDiscreteScheduler

        source, default = str(source), dtype.get("default", torch.float32)
        models = cls._part_classes()
        parts.pop("variant", None)  # each part's own, below (weight_variants)
        loaded = dict(parts)
        for name, model_class in models.items():
            if name not in loaded:
                loaded[name] = model_class.from_pretrained(source, subfolder=name, dtype=dtype.get(name, default), **hub,
                                                           **part_keywords(source, name, hub))
        loaded["tokenizer"] = transformers.Qwen2Tokenizer.from_pretrained(source, subfolder="tokenizer", **hub)
        loaded["t5_tokenizer"] = transformers.AutoTokenizer.from_pretrained(source, subfolder="t5_tokenizer", **hub)
        loaded["scheduler"] = FlowMatchEulerDiscreteScheduler.from_pretrained(source, subfolder="scheduler", **hub)
        return SimpleNamespace(components=loaded, **loaded)

    def to(self, device):
        super().to(device)
        self.text_conditioner.to(device)
        return self

    # ---------------------------------------------------------------- parts and options

    @property
    def lora_layer_presets(self) -> dict[str, dict[str, list[str]]]:
        return {"transformer": TRANSFORMER_PRESETS, "text_encoder": QWEN_PRESETS}

    def _layer_skip_top(self, part: str) -> int:
        """None: the adapter was trained on Qwen3's last layer (OneTrainer reads no skip either)."""
        return 0

    def configure_flow(self, config) -> None:
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)

    @property
    def text_encoder_sequence_length(self) -> int:
        return self._sequence_length

    @text_encoder_sequence_length.setter
    def text_encoder_sequence_length(self, length: int | None) -> None:
        """The token window of both tokenizers (blank: 512, the most: the adapter's output is 512
        tokens long, and the transformer reads its padding)."""
        length = int(length or MAX_SEQUENCE_LENGTH)
        if not 1 <= length <= MAX_SEQUENCE_LENGTH:
            raise ValueError(f"text_encoder_sequence_length: {length} is out of range; Anima reads 1 to {MAX_SEQUENCE_LENGTH} tokens")
        self._sequence_length = length
        for tokenizer in (self.tokenizer, self.t5_tokenizer):
            tokenizer.model_max_length = length

    # ---------------------------------------------------------------- text

    def _tokens(self, tokenizer, texts: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
        out = tokenizer(texts, padding="longest", max_length=self.text_encoder_sequence_length, truncation=True, return_tensors="pt")
        ids, mask = out.input_ids.to(device), out.attention_mask.to(device)
        if ids.shape[-1] == 0:  # every prompt empty: one masked token, as the pipeline
            ids, mask = ids.new_zeros((ids.shape[0], 1)), mask.new_zeros((mask.shape[0], 1))
        return ids, mask

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, 512, width)}: the adapter's output for the prompts, as
        the pipeline's text and text-conditioning steps compute it."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        device = module_device(self.text_encoder)
        ids, mask = self._tokens(self.tokenizer, texts, device)
        t5_ids, t5_mask = self._tokens(self.t5_tokenizer, texts, device)
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            hidden = self.text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=False).last_hidden_state
            hidden = hidden * mask.to(hidden).unsqueeze(-1)
            conditioner = self._conditioner_at(hidden.device, hidden.dtype)
            out = conditioner(source_hidden_states=hidden, target_input_ids=t5_ids, target_attention_mask=t5_mask,
                              source_attention_mask=mask)
        return {"encoder_hidden_states": out}

    def _conditioner_at(self, device: torch.device, dtype: torch.dtype | None = None) -> torch.nn.Module:
        """The adapter on `device` (in `dtype`): it follows the text encoder, which the trainer
        moves as a part (the adapter is not one: no config section, no LoRA, kept out of quantization)."""
        conditioner = self.text_conditioner
        weight = next(conditioner.parameters())
        if device.type == "meta" and weight.device.type != "meta":  # a memory probe's stand-in: real weights stay real
            return conditioner
        if weight.device != device or (dtype is not None and weight.dtype != dtype):
            conditioner.to(device, dtype)
        return conditioner

    @property
    def text_cache_modules(self) -> tuple[torch.nn.Module, ...]:
        """What turns text into conditioning besides the text encoder: the adapter (its weights key the text cache)."""
        return (self.text_conditioner,)

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,)."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        self._conditioner_at(module_device(self.text_encoder))  # back in RAM once the text encoder waits there
        b, _, h, w = noisy.shape
        factor = self.vae_scale_factor
        out = transformer(
            hidden_states=noisy.to(device, dtype).unsqueeze(2),
            timestep=t.to(device, dtype).expand(b),
            encoder_hidden_states=conditioning["encoder_hidden_states"].to(device, dtype),
            padding_mask=torch.zeros(1, 1, h * factor, w * factor, device=device, dtype=dtype),
            return_dict=False,
        )[0]
        return out.squeeze(2)

    # ---------------------------------------------------------------- sampling

    def pipeline(self):
        """diffusers' Anima pipeline sharing this model's (possibly adapter-wrapped) parts."""
        components = {part: base_module(module) for part, module in self.parts.items()}
        return AnimaPipeline({**components, "text_conditioner": self.text_conditioner, "tokenizer": self.tokenizer,
                              "t5_tokenizer": self.t5_tokenizer, "scheduler": type(self.scheduler).from_config(self.scheduler.config)})

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Our conditioning and the pipeline's CFG guider (on above 1, with the negative prompt)."""
        dtype = compute_dtype(self.transformer)
        inputs = {"prompt_embeds": self.encode_text([prompt])["encoder_hidden_states"].to(dtype), "guidance_scale": float(cfg_scale)}
        if cfg_scale > 1:
            inputs["negative_prompt_embeds"] = self.encode_text([negative_prompt or ""])["encoder_hidden_states"].to(dtype)
        return inputs

    def decode_sample(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """The blocks' latents (B, C, 1, H, W) decoded."""
        return self.decode_latents(latents.squeeze(2))

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The original checkpoint, as OneTrainer's ORIGINAL_TRANSFORMER and the published file: the
        DiT under `net.` and the adapter under `net.llm_adapter.` (its keys are diffusers' already)."""
        from ot_gradio.models.common import cast_state_dict
        from ot_gradio.models.key_layout import save_tensors

        state, dt, header = self.transformer_file_contents(dtype, "anima", metadata)
        tensors = {"net." + dit_key(k): v for k, v in state.items()}
        tensors |= {"net.llm_adapter." + k: v for k, v in self.text_conditioner.state_dict().items()}
        return save_tensors(path, {k: v.contiguous() for k, v in cast_state_dict(tensors, dt).items()}, header)

    def save_diffusers(self, directory: str | os.PathLike, dtype: DataType | torch.dtype | None) -> Path:
        """A folder in the repo's modular layout (every part, the adapter, both tokenizers, the
        scheduler, modular_model_index.json naming them in the folder), written atomically."""
        import diffusers

        parts = {**self.parts, "text_conditioner": self.text_conditioner}

        def write_rest(tmp: Path) -> None:
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.t5_tokenizer.save_pretrained(tmp / "t5_tokenizer")
            self.scheduler.save_pretrained(tmp / "scheduler")
            write_modular_index(tmp, Path(directory), {**parts, "tokenizer": self.tokenizer, "t5_tokenizer": self.t5_tokenizer,
                                                       "scheduler": self.scheduler}, diffusers.__version__)

        return save_diffusers_folder(directory, parts, dtype, write_rest)


def dit_key(key: str) -> str:
    """The original DiT key of a CosmosTransformer3DModel weight of Anima."""
    from ot_gradio.models.comfy_lora_names import anima_original

    layer, _, leaf = key.rpartition(".")
    if (original := anima_original(layer)) is not None:
        return f"{original}.{leaf}"
    if layer == "time_embed.norm":
        return f"t_embedding_norm.{leaf}"
    head, _, index_rest = layer.partition(".")
    index, _, rest = index_rest.partition(".")
    if head == "transformer_blocks" and rest in DIT_NORMS:
        return f"blocks.{index}.{DIT_NORMS[rest]}.{leaf}"
    raise ValueError(f"Anima's transformer has a weight {key!r} the original checkpoint has no name for")


def write_modular_index(folder: Path, final: Path, components: Mapping, version: str) -> None:
    """`folder`/modular_model_index.json for AnimaModularPipeline, each component read from its
    subfolder of `final` (where the folder ends up)."""
    index = {"_blocks_class_name": "AnimaAutoBlocks", "_class_name": "AnimaModularPipeline", "_diffusers_version": version}
    for name, component in sorted(components.items()):
        component = base_module(component) if isinstance(component, torch.nn.Module) else component
        library = "transformers" if type(component).__module__.startswith("transformers") else "diffusers"
        cls = type(component).__name__
        index[name] = [library, cls, {"pretrained_model_name_or_path": str(Path(final).resolve()), "revision": None,
                                      "subfolder": name, "type_hint": [library, cls], "variant": None}]
    (folder / "modular_model_index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
