"""Ideogram 4: load, encode, predict, sample, save (a flow-matching family: the shared core in
training/flow_matching.py draws t, makes the noisy input and the target `noise - latents`; this
module maps t to the transformer and back).

What Ideogram 4 is (diffusers' Ideogram4Pipeline, OneTrainer's IDEOGRAM_4):
- Text: a Qwen3-VL model (`text_encoder`, Qwen3VLModel; its vision tower never runs). Each prompt
  is one user turn of the chat template with the generation prompt, tokenized alone (no special
  tokens added) and cut to `text_encoder_sequence_length` tokens (blank: 2048, the pipeline's
  `max_sequence_length`). The hidden states of 13 decoder layers (0, 3, ..., 33, 35) are
  interleaved into the width (the pipeline's own `_get_text_encoder_hidden_states`, stacked as it
  stacks them). `encode_text` keeps each prompt's tokens first and zeros after them with a mask,
  so the text cache stores the prompt's rows only; `predict` packs them as the pipeline does.
- The transformer (Ideogram4Transformer2DModel) reads one packed sequence per sample:
  [left padding][text][image tokens], with 3-axis positions, segment ids and a per-token role
  (the pipeline's `_prepare_ids`); the text block is the batch's longest prompt (padding is
  masked out by the segment ids, so its length changes nothing). It reads t as the fraction of
  signal (1 - t) and predicts `latents - noise`; `predict` returns its negation.
- Latents: AutoencoderKLFlux2's 32 channels cut into 2x2 patches (128 channels at 1/16 of the
  side, in the pipeline's order: row, column, channel) and normalised by the VAE's batch-norm
  statistics, as the pipeline denormalises them.
- `dynamic_timestep_shifting` is the pipeline's resolution-aware shift (e^mu = sqrt(pixels / 512^2),
  OneTrainer's), not the scheduler config's linear rule.
- Asymmetric CFG: a second transformer, `unconditional_transformer`, denoises the image tokens
  alone with zero text features; a sample blends the two, v = g * v_cond + (1 - g) * v_uncond
  (at CFG 1 or below the conditional branch alone, as OneTrainer's sampler).
  As in OneTrainer only `transformer` is trained (LoRA keys `transformer.*`, which
  Ideogram4Pipeline.load_lora_weights reads); the unconditional one is frozen, waits on the CPU
  and joins only for samples, taking turns with the trained one on the sampling device (as Wan
  2.2 A14B's experts do). `unconditional_transformer.include` off (OneTrainer's "Include
  Unconditional Transformer"): it is not loaded, and as OneTrainer's IdeogramSampler a sample's
  negative branch is the empty prompt, encoded as any prompt, through the trained transformer
  (`EmptyPromptBranch`).
- Loading: a hub id, a diffusers folder or `tiny:ideogram4`; single files are refused (as
  OneTrainer). Saving: a diffusers folder with both transformers (without the unconditional one
  where it was left out, as OneTrainer's: its model_index.json entry null), or (ORIGINAL_TRANSFORMER /
  COMFY_TRANSFORMER) the trained transformer alone in the original names, OneTrainer's file: q, k
  and v concatenated into `attention.qkv`, `attention.to_out.0` named `attention.o`, the rest as in
  diffusers. KOHYA_LORA / COMFY_LORA files name layers so too, under `diffusion_model.`, the q/k/v
  layers written as one layer on the fused `qkv` (models/comfy_lora_names.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import DataType, ModelType
from ot_gradio.models.common import ModelLoadError, base_module, input_dtype, keep_embedders_unquantized, module_device
from ot_gradio.models.excluded_parts import excluded_now
from ot_gradio.models.family_parts import Flux2VaeLatents
from ot_gradio.models.flow_family import FlowFamily, TokenWindow
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family
from ot_gradio.models.sampling_parts import denoiser_in_its_dtype, turns_on_device

DEFAULT_SEQUENCE_LENGTH = 2048  # the pipeline's max_sequence_length and OneTrainer's PROMPT_MAX_LENGTH
PATCH = 2
# OneTrainer's Ideogram layer presets
TRANSFORMER_PRESETS = {"full": [], "attn-mlp": ["attention", "feed_forward"], "attn-only": ["attention"], "blocks": ["layers"]}
UNCONDITIONAL = "unconditional_transformer"


def patchify(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) VAE latents -> (B, 4C, H/2, W/2), each patch's channels in the pipeline's
    order (patch row, patch column, channel)."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 3, 5, 1, 2, 4)
    return x.reshape(b, PATCH * PATCH * c, h // PATCH, w // PATCH)


def unpatchify(latents: torch.Tensor) -> torch.Tensor:
    """The inverse of `patchify`."""
    b, cp, gh, gw = latents.shape
    c = cp // (PATCH * PATCH)
    x = latents.view(b, PATCH, PATCH, c, gh, gw).permute(0, 3, 4, 1, 5, 2)
    return x.reshape(b, c, gh * PATCH, gw * PATCH)


def packed_text(conditioning: Mapping, grid_h: int, grid_w: int, device, dtype):
    """The pipeline's `encode_prompt` output for our encoding: (text features over the packed
    sequence, position ids, segment ids, role), the text block as long as the longest prompt,
    each prompt at its end (left padding)."""
    from diffusers import Ideogram4Pipeline

    hidden, mask = conditioning["encoder_hidden_states"], conditioning["attention_mask"].bool()
    lengths = [int(n) for n in mask.sum(dim=1).tolist()]
    block = max(lengths)
    b, _, width = hidden.shape
    features = torch.zeros(b, block + grid_h * grid_w, width, device=device, dtype=dtype)
    for i, n in enumerate(lengths):
        features[i, block - n:block] = hidden[i, :n].to(device, dtype)
    return (features, *Ideogram4Pipeline._prepare_ids(lengths, grid_h, grid_w, block, device))


class EmptyPromptBranch:
    """Ideogram4Pipeline's `unconditional_transformer` for a model that left it out, as OneTrainer's
    IdeogramSampler samples without it: the negative branch is the trained `transformer` reading
    the empty prompt (`empty`: its encoding) packed before the image tokens, as the conditional
    branch reads the prompt, its image tokens' output taken. The pipeline calls it with the image
    tokens' slice of the layout (their positions do not depend on the text) and zero text features
    over them. `empty` None: CFG 1 or below, where the blend gives the negative branch no weight,
    so nothing runs (OneTrainer encodes no empty prompt then either)."""

    def __init__(self, transformer: torch.nn.Module, empty: Mapping | None):
        self.transformer, self.empty = transformer, empty

    @property
    def dtype(self) -> torch.dtype:  # what the pipeline casts this branch's inputs to: the transformer's, as for its own call
        return self.transformer.dtype

    def __call__(self, hidden_states, timestep, encoder_hidden_states, position_ids, segment_ids, indicator,
                 attention_kwargs=None, return_dict=False):
        if self.empty is None:
            return (torch.zeros_like(hidden_states),)
        b, device, dtype = hidden_states.shape[0], hidden_states.device, self.transformer.dtype
        text, *ids = packed_text(self.empty, 0, 0, device, dtype)  # the empty prompt's block alone (no image tokens)
        block = text.shape[1]

        def joined(head: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
            return torch.cat([head.expand(b, *head.shape[1:]), tail], dim=1)

        out = self.transformer(
            hidden_states=torch.cat([hidden_states.new_zeros(b, block, hidden_states.shape[-1]), hidden_states.to(dtype)], dim=1),
            timestep=timestep, encoder_hidden_states=joined(text, encoder_hidden_states.to(dtype)),
            position_ids=joined(ids[0], position_ids), segment_ids=joined(ids[1], segment_ids), indicator=joined(ids[2], indicator),
            attention_kwargs=attention_kwargs, return_dict=False,
        )[0]
        return (out[:, block:],)


@register_family(ModelType.IDEOGRAM_4)
class Ideogram4(Flux2VaeLatents, TokenWindow, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Ideogram 4."""
    fp16_unstable = ("text_encoder",)  # T5 / the LLM overflows in float16

    modelspec_architecture = "Ideogram"  # OneTrainer's model spec
    comfy_lora_names = "ideogram4"  # KOHYA_LORA / COMFY_LORA: OneTrainer's names, q/k/v fused (models/comfy_lora_names.py)
    patch_size = 1  # the latents are patchified already (128 channels at 1/16)
    default_sequence_length = DEFAULT_SEQUENCE_LENGTH
    default_steps, default_cfg_scale = 48, 7.0  # the pipeline's recommended steps and main guidance
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS}
    pipeline_class_name = "Ideogram4Pipeline"
    transformer_class_name = "Ideogram4Transformer2DModel"
    folder_parts = ("transformer", "unconditional_transformer", "text_encoder", "tokenizer", "vae", "scheduler")

    def __init__(self, components: Mapping):
        """The unconditional transformer is None where it is left out (include off); a model
        without it is refused otherwise."""
        super().__init__(components)
        self.unconditional_transformer = None if UNCONDITIONAL in excluded_now() else components.get(UNCONDITIONAL)
        if self.unconditional_transformer is not None:
            self.unconditional_transformer.requires_grad_(False).eval()
        elif UNCONDITIONAL not in excluded_now():
            raise ModelLoadError("The model has no unconditional_transformer; Ideogram 4 samples with it (its asymmetric CFG) "
                                 "while unconditional_transformer.include is on. Pick a complete Ideogram 4 model, or turn "
                                 "unconditional_transformer.include off (Training tab, Unconditional transformer: Include): "
                                 "samples with CFG above 1 then run an empty prompt through the trained transformer instead, "
                                 "as OneTrainer's.")
        self._negative_branch: EmptyPromptBranch | None = None  # a sample's, without it (pipeline_inputs -> pipeline)

    @classmethod
    def _pipeline_from(cls, source, dtype, hub: Mapping, **parts):
        """The unconditional transformer loads in the transformer's dtype, and not at all where it is
        left out or a local folder has none (then __init__ says what to do); the prompt enhancer
        head is not loaded."""
        dtype = {**dtype, UNCONDITIONAL: dtype.get("transformer", dtype["default"])}
        if UNCONDITIONAL in excluded_now() or (Path(source).is_dir() and not (Path(source) / UNCONDITIONAL).is_dir()):
            parts[UNCONDITIONAL] = None
        return super()._pipeline_from(source, dtype, hub, prompt_enhancer_head=None, **parts)

    @property
    def saved_parts(self) -> dict[str, torch.nn.Module]:
        """The parts and the unconditional transformer, where it was loaded."""
        extra = {UNCONDITIONAL: self.unconditional_transformer} if self.unconditional_transformer is not None else {}
        return {**self.parts, **extra}

    # ---------------------------------------------------------------- parts and options

    def _check_layer_skip(self, part: str, skip: int) -> None:
        """Refused: the pipeline reads 13 fixed hidden layers, and so does training."""
        if skip:
            raise ValueError(f"{part}_layer_skip: Ideogram 4 reads 13 fixed hidden layers of its text encoder; set it to 0")

    def configure_flow(self, config) -> None:
        """The run's token window; the text encoder stays frozen (refused); the embedders of both
        transformers are kept out of quantization."""
        if config.text_encoder.train:
            raise ValueError("text_encoder.train: Ideogram 4 trains the transformer only (as OneTrainer; "
                             "Ideogram4Pipeline loads transformer LoRAs only); turn it off")
        self.text_encoder_sequence_length = getattr(config, "text_encoder_sequence_length", None)
        keep_embedders_unquantized(self.transformer)
        if self.unconditional_transformer is not None:
            keep_embedders_unquantized(self.unconditional_transformer)  # quantized in its own weight type too

    def resolution_shift(self, latents: torch.Tensor) -> float:
        """The pipeline's resolution-aware shift (its `_resolution_aware_mu` from 512 x 512, as
        OneTrainer's `calculate_timestep_shift`): e^mu = sqrt(pixels / 512^2), a token being 16 x 16 px."""
        return math.sqrt(latents.shape[-2] * latents.shape[-1] * 256 / 512**2)

    # ---------------------------------------------------------------- text

    def token_ids(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask) of each prompt's chat turn, its tokens first, cut to the window."""
        window = self.text_encoder_sequence_length
        ids = torch.zeros(len(texts), window, dtype=torch.long)
        mask = torch.zeros(len(texts), window, dtype=torch.long)
        for i, text in enumerate(texts):
            messages = [{"role": "user", "content": [{"type": "text", "text": text}]}]
            chat = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            tokens = self.tokenizer(chat, return_tensors="pt", add_special_tokens=False).input_ids[0][:window]
            ids[i, :len(tokens)], mask[i, :len(tokens)] = tokens, 1
        return ids, mask

    @staticmethod
    def tapped_states(encoder, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """The outputs of the decoder layers the pipeline taps (its `_get_text_encoder_hidden_states`),
        through the encoder's own forward (so the memory planner's shape-only encoder stands in):
        the hidden states it returns, but the last layer's, which it returns after the final norm,
        is taken from that layer itself."""
        from diffusers.pipelines.ideogram4.pipeline_ideogram4 import QWEN3_VL_ACTIVATION_LAYERS

        layers = encoder.language_model.layers
        if len(layers) <= max(QWEN3_VL_ACTIVATION_LAYERS):
            raise ModelLoadError(f"The text encoder has {len(layers)} layers; Ideogram 4 reads hidden states up to layer "
                                 f"{max(QWEN3_VL_ACTIVATION_LAYERS)}.")
        final = len(layers) - 1
        captured = []
        hook = layers[final].register_forward_hook(lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
        try:
            hidden = encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        finally:
            hook.remove()
        return [captured[0] if i == final and captured else hidden[i + 1] for i in QWEN3_VL_ACTIVATION_LAYERS]

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"encoder_hidden_states": (B, window, 13 x width), zero past each prompt's tokens,
        "attention_mask": (B, window) bool}: the pipeline's text features, each prompt first."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        encoder = base_module(self.text_encoder)
        ids, mask = self.token_ids(texts)
        used = max(int(mask.sum(dim=1).max()), 1)  # the encoder is causal: the rows past the longest prompt change nothing
        device = module_device(encoder)
        ids_used, mask_used = ids[:, :used].to(device), mask[:, :used].to(device)
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            states = self.tapped_states(encoder, ids_used, mask_used)
            hidden = torch.stack(states, dim=0).permute(1, 2, 3, 0).reshape(len(texts), used, -1)
            hidden = hidden * mask_used.unsqueeze(-1).to(hidden.dtype)
        hidden = torch.nn.functional.pad(hidden, (0, 0, 0, self.text_encoder_sequence_length - used))
        return {"encoder_hidden_states": hidden, "attention_mask": mask.to(device).bool()}

    # ---------------------------------------------------------------- latents (Flux2VaeLatents, in the pipeline's patch order)

    patchify = staticmethod(patchify)
    unpatchify = staticmethod(unpatchify)

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, 128, h, w) for noisy latents at noise fraction `t` (B,): the packed
        sequence with zero latents over the text block, the timestep as 1 - t, the output negated."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        b, c, h, w = noisy.shape
        features, positions, segments, roles = packed_text(conditioning, h, w, device, dtype)
        block = features.shape[1] - h * w
        tokens = noisy.to(device, dtype).flatten(2).transpose(1, 2)
        hidden = torch.cat([tokens.new_zeros(b, block, c), tokens], dim=1)
        out = transformer(
            hidden_states=hidden, timestep=(1 - t.to(device, torch.float32)).expand(b).to(dtype), encoder_hidden_states=features,
            position_ids=positions, segment_ids=segments, indicator=roles, return_dict=False,
        )[0]
        return -out[:, block:].transpose(1, 2).reshape(b, c, h, w)

    # ---------------------------------------------------------------- sampling

    def pipeline(self):
        """Ideogram4Pipeline with both transformers; its prompt encoding reads ours (`pipeline_inputs`).
        Without the unconditional transformer: a sample's `EmptyPromptBranch` in its place, else
        None (a saved folder's model_index.json says it has none)."""
        from diffusers import Ideogram4Pipeline

        components = {part: base_module(module) for part, module in self.saved_parts.items()}
        if self.unconditional_transformer is None:
            components[UNCONDITIONAL], self._negative_branch = self._negative_branch, None
        scheduler = type(self.scheduler).from_config(self.scheduler.config)
        pipe = Ideogram4Pipeline(scheduler=scheduler, tokenizer=self.tokenizer, **components)
        pipe.set_progress_bar_config(disable=True)
        pipe.encode_prompt = self._encoded_prompt
        return pipe

    def _encoded_prompt(self, prompt, grid_h: int, grid_w: int, max_sequence_length: int, device):
        """The pipeline's `encode_prompt` for a prompt encoded already: the pipeline takes no
        prompt embeddings, so `pipeline_inputs` hands it our encoding as the prompt."""
        (conditioning,) = prompt
        return packed_text(conditioning, grid_h, grid_w, device, torch.float32)

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Our encoding as the prompt (the window the run trained with), a constant guidance scale
        (1 at CFG 1 or below: the conditional branch alone, as OneTrainer's sampler); no negative
        prompt (the unconditional transformer reads no text; without it, as OneTrainer's, the empty
        prompt is the negative branch: encoded here, while the text encoder is on the device)."""
        conditioning = self.encode_text([prompt])
        guided = cfg_scale > 1
        if self.unconditional_transformer is None:
            self._negative_branch = EmptyPromptBranch(base_module(self.transformer), self.encode_text([""]) if guided else None)
        return {"prompt": [conditioning], "max_sequence_length": int(conditioning["attention_mask"].sum()),
                "guidance_scale": float(cfg_scale) if guided else 1.0, "guidance_schedule": None}

    def save_single_file(self, path: str | os.PathLike, dtype: DataType | torch.dtype | None, metadata=None) -> Path:
        """The trained transformer alone in the original names (OneTrainer's ORIGINAL_TRANSFORMER
        file; OneTrainer refuses single files for Ideogram 4 and diffusers' from_single_file has no
        Ideogram 4 mapping, so nothing here loads it back)."""
        from ot_gradio.models.comfy_lora_names import IDEOGRAM4_RENAMES
        from ot_gradio.models.key_layout import fused_original, save_tensors

        state_dict, dtype, header = self.transformer_file_contents(dtype, self.modelspec_architecture, metadata)
        return save_tensors(path, fused_original(state_dict, IDEOGRAM4_RENAMES, dtype), header)

    def decode_sample(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """The pipeline hands back its packed, normalised tokens (B, h*w, 128)."""
        b, _, c = latents.shape
        return self.decode_latents(latents.transpose(1, 2).reshape(b, c, height // self.bucket_step, width // self.bucket_step))

    def sample(self, *args, device: torch.device | str | None = None, **kwargs):
        """An image from both transformers, one on the sampling device at a time (the
        unconditional one comes from the CPU for its turns and goes back after the sample);
        without it, from the trained transformer alone (`EmptyPromptBranch`)."""
        if self.unconditional_transformer is None:
            try:
                return super().sample(*args, device=device, **kwargs)
            finally:
                self._negative_branch = None
        target = torch.device(device) if device is not None else module_device(self.transformer)
        with turns_on_device(base_module(self.transformer), self.unconditional_transformer, target), \
                denoiser_in_its_dtype(self.unconditional_transformer):  # (the pipeline gives it inputs in the transformer's type)
            return super().sample(*args, device=device, **kwargs)
