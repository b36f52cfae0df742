"""Qwen-Image: load, encode, predict, sample, save (a flow-matching family on the shared core in
training/flow_matching.py; Z-Image's module gives the loading, the token window and the saving,
this one what differs).

What Qwen-Image is (diffusers' QwenImagePipeline, OneTrainer's QWEN):
- One text encoder, Qwen2.5-VL 7B (`text_encoder`, Qwen2_5_VLForConditionalGeneration; its vision
  tower is not used for prompts). Each prompt is put in the pipeline's template (a system line
  asking to describe the image, the prompt as the user turn, the assistant turn opened), the last
  hidden state is taken (a layer skip goes further back), and the template's first 34 tokens are
  dropped: what is left is the prompt and the assistant opening, at most
  `text_encoder_sequence_length` tokens (blank: 512, the pipeline's `max_sequence_length`).
  `encode_text` returns them padded to the window with zeros and a mask, so a batch and the text
  cache hold one tensor; `predict` trims the batch to its longest prompt, as the pipeline pads.
- The VAE (AutoencoderKLQwenImage) is a video VAE: an image is one frame (B, C, 1, H, W); its
  latents are normalised per channel with `latents_mean` / `latents_std`.
- QwenImageTransformer2DModel (MMDiT, 60 blocks) reads the latents as Flux does (2x2 patches, a
  token of 4C values each) with the frame/row/column shape of each image (`img_shapes`), the
  timestep t in (0, 1] itself, and predicts the velocity `noise - latents` directly.
- The scheduler is FlowMatchEuler with dynamic shifting from the token count (base 0.5, max 0.9);
  the core reads its config. Sampling uses the pipeline's true CFG (`true_cfg_scale`, with the
  negative prompt, on above 1) and its norm rescale.
- Loading: a hub id, a diffusers folder, `tiny:qwen-image`, or the transformer file people download
  (`qwen_image_bf16.safetensors`: diffusers' own key names, which `from_single_file` reads as they
  are) with the text encoder, VAE and configs from a diffusers folder or the hub repo. Saving: a
  diffusers folder, or the transformer alone in that layout (what ComfyUI's diffusion model loader
  reads). LoRA keys are the transformer's names: ComfyUI places `transformer.<path>`,
  `diffusion_model.<path>` and `lora_unet_<path with _>` on `diffusion_model.<path>.weight`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import (
    base_module,
    compute_dtype,
    input_dtype,
    keep_embedders_unquantized,
    language_model_config,
    module_device,
    vl_language_model_presets,
)
from ot_gradio.models.flow_family import (
    FlowFamily,
    WanImageLatents,
    pack_latents,
    trim_to_longest,
    unpack_latents,
)
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family

DEFAULT_SEQUENCE_LENGTH = 512
# QwenImagePipeline's prompt_template_encode and prompt_template_encode_start_idx
PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
TEMPLATE_TOKENS = 34
# OneTrainer's BaseQwenSetup layer presets for the transformer
TRANSFORMER_PRESETS = {"full": [], "attn-mlp": ["attn", "img_mlp", "txt_mlp"], "attn-only": ["attn"], "blocks": ["transformer_block"]}


def save_transformer_file(path: str | os.PathLike, state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None,
                          metadata: Mapping[str, str]) -> Path:
    """The transformer alone as one `.safetensors` under diffusers' names (the layout of the
    published `qwen_image_bf16.safetensors`), written atomically."""
    from ot_gradio.models.key_layout import save_tensors

    tensors = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous() for k, v in state_dict.items()}
    return save_tensors(path, tensors, metadata)


def comfy_lora_targets(transformer: torch.nn.Module, lora_keys: Sequence[str]) -> dict[str, str]:
    """For each LoRA layer (`transformer.<path>`, `diffusion_model.<path>` or `lora_unet_<path>`),
    the transformer weight ComfyUI patches: its Qwen-Image model keeps diffusers' names under
    `diffusion_model.`, and its generic rules place `lora_unet_` + the name with `.` -> `_`. A key
    it cannot place raises ValueError naming it."""
    from ot_gradio.models.key_layout import lora_layer

    weights = [k.replace(".base_layer.", ".") for k in base_module(transformer).state_dict() if ".lora_" not in k]
    by_flat = {w.removesuffix(".weight").replace(".", "_"): w for w in weights if w.endswith(".weight")}
    out = {}
    for key in lora_keys:
        layer = lora_layer(key)
        if layer.startswith("lora_unet_"):
            weight = by_flat.get(layer.removeprefix("lora_unet_"))
        else:
            path = layer.removeprefix("transformer.").removeprefix("diffusion_model.")
            weight = path + ".weight" if path + ".weight" in weights and path != layer else None
        if weight is None:
            raise ValueError(f"LoRA key {key!r}: ComfyUI's Qwen-Image model has no weight for it")
        out[layer] = "diffusion_model." + weight
    return out


@register_family(ModelType.QWEN)
class QwenImage(WanImageLatents, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Qwen-Image."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    comfy_lora_names = "qwen_image"  # the text encoder as ComfyUI names it (models/comfy_lora_names.py)
    embedding_keys: dict[str, str] = {}  # no EMBEDDING method (as OneTrainer)
    single_file_layout = "diffusers"  # the published transformer file keeps diffusers' names
    default_steps, default_cfg_scale = 30, 4.0

    pipeline_class_name = "QwenImagePipeline"
    transformer_class_name = "QwenImageTransformer2DModel"

    # ---------------------------------------------------------------- parts and options

    @property
    def lora_layer_presets(self) -> dict[str, dict[str, list[str]]]:
        return {"transformer": TRANSFORMER_PRESETS, "text_encoder": vl_language_model_presets(int(language_model_config(self.text_encoder).num_hidden_layers))}

    def _layer_skip_top(self, part: str) -> int:
        """The pipeline reads the last layer; a skip goes back up to the first."""
        return int(language_model_config(self.text_encoder).num_hidden_layers) - 1

    def configure_flow(self, config) -> None:
        """The run's token window; the embedders diffusers keeps in the compute type stay out of
        the quantization that follows."""
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)
        keep_embedders_unquantized(self.transformer)

    @property
    def text_encoder_sequence_length(self) -> int:
        return self._sequence_length

    @text_encoder_sequence_length.setter
    def text_encoder_sequence_length(self, length: int | None) -> None:
        """The prompt's token window after the template (blank: 512, the pipeline's; at most
        1024); the tokenizer reads it plus the template's 34 tokens, and cached text embeddings
        are keyed by that."""
        length = int(length or DEFAULT_SEQUENCE_LENGTH)
        if not 1 <= length <= 1024:
            raise ValueError(f"text_encoder_sequence_length: {length} is out of range; Qwen-Image reads at most 1024 tokens")
        self._sequence_length = length
        self.tokenizer.model_max_length = length + TEMPLATE_TOKENS

    # ---------------------------------------------------------------- text

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, width), zero past each prompt's tokens,
        "attention_mask": (B, window) bool}: the pipeline's embeddings (last hidden state, or
        earlier with a layer skip, the template's first 34 tokens dropped)."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        window = self.text_encoder_sequence_length
        out = self.tokenizer(
            [PROMPT_TEMPLATE.format(text) for text in texts], padding="max_length", max_length=window + TEMPLATE_TOKENS,
            truncation=True, padding_side="right", return_tensors="pt",
        )
        device = module_device(self.text_encoder)
        ids, mask = out.input_ids.to(device), out.attention_mask.to(device)
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            hidden = self.text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
            hidden = hidden[-(1 + self.layer_skips.get("text_encoder", 0))]
            lengths = mask.sum(dim=1) - TEMPLATE_TOKENS
            if int(lengths.min()) < 1:
                raise ValueError("text_encoder_sequence_length: the window holds no prompt token after the template; raise it")
            hidden = hidden[:, TEMPLATE_TOKENS:]
            kept = torch.arange(window, device=device)[None, :] < lengths[:, None]
            hidden = hidden * kept.unsqueeze(-1).to(hidden.dtype)
        return {"encoder_hidden_states": hidden, "attention_mask": kept}

    trimmed = staticmethod(trim_to_longest)

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,)."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        b, _, h, w = noisy.shape
        hidden, mask = self.trimmed(conditioning, device, dtype)
        out = transformer(
            hidden_states=pack_latents(noisy.to(device, dtype)),
            encoder_hidden_states=hidden,
            encoder_hidden_states_mask=mask,
            timestep=t.to(device, dtype).expand(b),
            img_shapes=[[(1, h // 2, w // 2)]] * b,
            return_dict=False,
        )[0]
        return unpack_latents(out, h, w)

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """The prompt's embeddings and the pipeline's true CFG (on above 1, with the negative prompt)."""
        dtype = compute_dtype(self.transformer)
        hidden, mask = self.trimmed(self.prompt_embeddings([prompt]), dtype=dtype, keep_mask=True)
        inputs = {"prompt_embeds": hidden, "prompt_embeds_mask": mask, "true_cfg_scale": float(cfg_scale)}
        if cfg_scale > 1:
            inputs["negative_prompt_embeds"], inputs["negative_prompt_embeds_mask"] = self.trimmed(
                self.prompt_embeddings([negative_prompt or ""]), dtype=dtype, keep_mask=True
            )
        return inputs

    def prompt_embeddings(self, texts: Sequence[str]) -> dict:
        """A sample's `encode_text` (Qwen-Image-Edit: with the sample's control image)."""
        return self.encode_text(texts)

    def sample_options(self) -> dict:
        return {"max_sequence_length": self.text_encoder_sequence_length}

    # ---------------------------------------------------------------- saving

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The transformer alone under diffusers' names (ComfyUI's diffusion model loader and
        `from_single_file` read it); the text encoder and VAE are the base model's."""
        return save_transformer_file(path, *self.transformer_file_contents(dtype, "qwen-image", metadata))
