"""HiDream-I1 Full text-to-image: load, encode, predict, sample, save (a flow-matching family: the
shared core in training/flow_matching.py draws t, makes the noisy input and the target
`noise - latents`; this module maps t to the transformer and back).

What HiDream-I1 is (diffusers' HiDreamImagePipeline, OneTrainer's HiDreamModel):
- Four text encoders, each reading 128 tokens (the pipeline's `max_sequence_length`):
  CLIP-L and CLIP-G (`text_encoder`, `text_encoder_2`, CLIPTextModelWithProjection): their
  projected pooled outputs side by side; T5 (`text_encoder_3`): its last hidden state (a layer
  skip reads an earlier one with T5's final norm); Llama 3.1 (`text_encoder_4`,
  LlamaForCausalLM, padded with its end token as the pipeline sets it): the hidden states after
  every layer, stacked (layers, B, tokens, width); the transformer picks its `llama_layers`.
- HiDreamImageTransformer2DModel (mixture-of-experts blocks) reads 2x2 patches of the latents
  (B, 16, H/8, W/8), each patch's values in (row, column, channel) order, the timestep as
  t * 1000 and returns the negative velocity: the pipeline and OneTrainer negate it, so
  `predict` returns `noise - latents`. In training mode it returns its patches unsorted
  (B, C, tokens, 4), put back here.
- The VAE is Flux's AutoencoderKL: latents are `(z - shift_factor) * scaling_factor`, which
  the pipeline inverts before decoding.
- Training draws t with the run's timestep shift (our preset: 3, the repo scheduler's); a repo
  that samples with UniPC in flow mode (which the pipeline also takes) trains at its flow_shift.
- HiDream-ai/HiDream-I1-Full has no Llama: its model_index.json lists text_encoder_4 and
  tokenizer_4 empty. The Llama comes from `text_encoder_4.model_name` (OneTrainer's preset:
  meta-llama/Llama-3.1-8B-Instruct), else from the base model's own text_encoder_4 folder.
- Samples keep the requested size: the pipeline would rescale every size to its 1024 px area.
- Loading: a hub id, a diffusers folder or `tiny:hidream`; single files are refused. Saving: a
  diffusers folder; LoRA as diffusers/PEFT keys (`transformer.double_stream_blocks.0.block.attn1.to_q.lora_A.weight`)
  that HiDreamImagePipeline.load_lora_weights reads, or KOHYA_LORA / COMFY_LORA.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import ModelLoadError, base_module, compute_dtype, input_dtype, module_device
from ot_gradio.models.excluded_parts import caption_lists, excluded_now, split_width, zeros
from ot_gradio.models.flow_family import FlowFamily, flow_training_scheduler
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family
from ot_gradio.models.sampling_parts import generation_size
from ot_gradio.models.weight_variants import variant_keywords

SEQUENCE_LENGTH = 128  # the pipeline's max_sequence_length, every encoder (OneTrainer's too)
CLIP_PARTS = ("text_encoder", "text_encoder_2")
T5_PART, LLAMA_PART = "text_encoder_3", "text_encoder_4"
# OneTrainer's BaseHiDreamSetup.LAYER_PRESETS for the transformer; the text encoders' own names
TRANSFORMER_PRESETS = {"full": [], "attn-mlp": ["attn1", "ff_i"], "attn-only": ["attn1"], "blocks": ["stream_block"]}
CLIP_PRESETS = {"full": [], "attn-mlp": ["self_attn", "mlp"], "attn-only": ["self_attn"]}
T5_PRESETS = {"full": [], "attn-mlp": ["SelfAttention", "DenseReluDense"], "attn-only": ["SelfAttention"]}
LLAMA_PRESETS = {"full": [], "attn-mlp": ["self_attn.", "mlp."], "attn-only": ["self_attn."]}
# where the Llama comes from while a model loads: (text_encoder_4.model_name, cache_dir, token, offline)
_LLAMA_SOURCE: contextvars.ContextVar[tuple] = contextvars.ContextVar("hidream_llama", default=("", None, None, False))


def pack_patches(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H/2 * W/2, 4 * C): 2x2 patches row by row, each in (row, column, channel) order."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, (h // 2) * (w // 2), 4 * c)


def unpack_training_output(out: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The transformer's training-mode output (B, C, H/2 * W/2, 4) as latents (B, C, H, W)."""
    b, c = out.shape[:2]
    x = out.reshape(b, c, height // 2, width // 2, 2, 2).permute(0, 1, 2, 4, 3, 5)
    return x.reshape(b, c, height, width)


@contextlib.contextmanager
def _experts_on_meta(transformer: torch.nn.Module):
    """For the memory probe: routing picks tokens by their values, which meta tensors have not, so
    each routed expert computes an equal share of the tokens (tokens x active / experts, the share
    a balanced routing gives it) and the shared experts all of them: the memory of a step, not its values."""
    from diffusers.models.transformers.transformer_hidream_image import MOEFeedForwardSwiGLU

    def balanced(layer, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        share = -(-flat.shape[0] * layer.num_activated_experts // len(layer.experts))
        routed = torch.cat([expert(flat[:share]) for expert in layer.experts])[: flat.shape[0]]
        return routed.view(x.shape) + layer.shared_experts(x)

    layers = [m for m in transformer.modules() if isinstance(m, MOEFeedForwardSwiGLU)]
    for layer in layers:
        layer.forward = functools.partial(balanced, layer)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


@register_family(ModelType.HI_DREAM_FULL)
class HiDream(IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for HiDream-I1 Full."""
    fp16_unstable = ("transformer", "text_encoder_3")  # as OneTrainer

    text_encoder_description = "its CLIP-L, CLIP-G, T5 and Llama 3.1 text encoders (the Llama: set Text encoder 4's model)"
    tokenizer_attrs = {"text_encoder": "tokenizer", "text_encoder_2": "tokenizer_2", "text_encoder_3": "tokenizer_3",
                       "text_encoder_4": "tokenizer_4"}
    folder_parts = ("transformer", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "text_encoder_3",
                    "tokenizer_3", "vae", "scheduler")
    # OneTrainer's keys (its HiDreamEmbeddingSaver)
    embedding_keys = {"text_encoder": "clip_l", "text_encoder_2": "clip_g", "text_encoder_3": "t5", "text_encoder_4": "llama"}
    # T5 only, as OneTrainer: the CLIPs give pooled outputs, Llama every layer's states
    output_embedding_parts = ("text_encoder_3",)
    # OneTrainer marks Llama an output embedding too (HiDreamModel's HiDreamModelEmbedding), so
    # its input vectors are zeros, but never applies its output vectors (commented out in its
    # encode_text): an output embedding's tokens enter Llama as zeros, its output there is Llama's
    zeroed_output_embedding_parts = ("text_encoder_4",)
    patch_size = None  # the transformer config's 2
    t5_part = T5_PART
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": CLIP_PRESETS, "text_encoder_2": CLIP_PRESETS,
                          "text_encoder_3": T5_PRESETS, "text_encoder_4": LLAMA_PRESETS}
    default_steps, default_cfg_scale = 50, 5.0
    pipeline_class_name = "HiDreamImagePipeline"
    transformer_class_name = "HiDreamImageTransformer2DModel"

    def __init__(self, components: Mapping):
        super().__init__(components)
        if self.tokenizer_4 is not None:  # (Llama left out: include false)
            self.tokenizer_4.pad_token = self.tokenizer_4.eos_token  # as the pipeline sets it
        self.noise_scheduler = flow_training_scheduler(self.scheduler)  # a repo sampling with UniPC in flow mode too
        self._sample_px = (1024, 1024)

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(cls, name: str, *, cache_dir: str | None = None, offline: bool = False, token: str | None = None,
             part_models: Mapping[str, str] | None = None, **options):
        """FlowFamily.load, with the Llama from `part_models["text_encoder_4"]` when given."""
        llama = str(dict(part_models or {}).get(LLAMA_PART) or "").strip()
        rest = {part: model for part, model in dict(part_models or {}).items() if part != LLAMA_PART}
        reset = _LLAMA_SOURCE.set((llama, cache_dir, token, offline))
        try:
            return super().load(name, cache_dir=cache_dir, offline=offline, token=token, part_models=rest, **options)
        finally:
            _LLAMA_SOURCE.reset(reset)

    @classmethod
    def _pipeline_from(cls, source: str | Path, dtype, hub: Mapping, **parts):
        """The pipeline with the Llama and its tokenizer from `text_encoder_4.model_name`, else from
        the base model's text_encoder_4 folder; a base model without one (HiDream-ai's repos) and no
        Llama named is refused, saying what to set."""
        from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

        llama, cache_dir, token, offline = _LLAMA_SOURCE.get()
        if LLAMA_PART in excluded_now():  # left out of the run (include: false): neither loaded nor asked for
            pass
        elif llama:
            path = Path(llama).expanduser()
            src, where = (str(path), {"local_files_only": True}) if path.is_dir() else \
                (llama, {"cache_dir": cache_dir, "token": token, "local_files_only": offline})
            weights = variant_keywords(path, part=True) if path.is_dir() else {}
            try:
                parts["text_encoder_4"] = LlamaForCausalLM.from_pretrained(src, dtype=dtype.get(LLAMA_PART, dtype["default"]), **where, **weights)
                parts["tokenizer_4"] = PreTrainedTokenizerFast.from_pretrained(src, **where)
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"text_encoder_4.model_name: the Llama '{llama}' could not be loaded ({exc}). Give a "
                                     "Llama 3.1 hub id (meta-llama/Llama-3.1-8B-Instruct, gated: accept its license and set "
                                     "the access token) or a folder with its config, weights and tokenizer.") from exc
        else:
            index = cls._pipeline_class().load_config(str(source), **hub)
            if not (index.get(LLAMA_PART) or [None])[0]:
                raise ModelLoadError(f"text_encoder_4.model_name: '{source}' has no Llama text encoder (HiDream-ai's repos "
                                     "ship without it). Set Text encoder 4's model to meta-llama/Llama-3.1-8B-Instruct "
                                     "(OneTrainer's preset does), or a folder of that model.")
            parts["tokenizer_4"] = PreTrainedTokenizerFast.from_pretrained(str(source), subfolder="tokenizer_4", **hub)
        return super()._pipeline_from(source, dtype, hub, **parts)

    # ---------------------------------------------------------------- parts and options

    def _layer_skip_top(self, part: str) -> int:
        """T5 may skip its layers; the CLIPs give their pooled outputs and Llama every layer's states (no skip)."""
        return super()._layer_skip_top(part) if part == T5_PART else 0

    # ---------------------------------------------------------------- text

    def _tokens(self, part: str, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        tokenizer = self.tokenizers[part]
        length = SEQUENCE_LENGTH if part in CLIP_PARTS else min(SEQUENCE_LENGTH, int(tokenizer.model_max_length))
        out = tokenizer(list(texts), padding="max_length", max_length=length, truncation=True, add_special_tokens=True,
                        return_tensors="pt")
        return out.input_ids, out.attention_mask

    def encode_clip_pooled(self, part: str, texts: Sequence[str], grad: bool = False) -> torch.Tensor:
        """A CLIP's projected pooled output for 128 tokens, as the pipeline's `_get_clip_prompt_embeds`."""
        encoder = getattr(self, part)
        ids, _ = self._tokens(part, texts)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            return encoder(ids.to(module_device(encoder)), output_hidden_states=True)[0]

    def encode_llama(self, texts: Sequence[str], grad: bool = False) -> torch.Tensor:
        """Llama's hidden states after each layer (B, layers, tokens, width), as the pipeline's
        `_get_llama3_prompt_embeds` (which stacks them layers first); with `mask_padding_tokens` the
        padding tokens' states are zeroed, as T5's (OneTrainer's transformer.attention_mask)."""
        encoder = self.text_encoder_4
        ids, mask = self._tokens(LLAMA_PART, texts)
        device = module_device(encoder)
        config = base_module(encoder).config
        if device.type == "meta" and not grad:  # the memory probe: a frozen Llama's states
            return torch.zeros(ids.shape[0], config.num_hidden_layers, ids.shape[1], config.hidden_size, device=device)
        # on meta (the probe, Llama trained) without the padding mask, whose checks call .item(): the same memory
        masks = {} if device.type == "meta" else {"attention_mask": mask.to(device)}
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            hidden = encoder(ids.to(device), output_hidden_states=True, **masks).hidden_states[1:]
        return self.padding_zeroed(torch.stack(hidden, dim=1), mask, token_dim=2)

    def encode_text(self, captions: Sequence[str] | Mapping[str, Sequence[str]], grad: frozenset[str] | set[str] = frozenset()):
        """{"pooled_embeds": CLIP-L | CLIP-G, "t5": T5's states, "llama": Llama's (B, layers, tokens,
        width)}; `captions` is one list or one per text encoder part (caption dropout per encoder)."""
        texts, batch = caption_lists(captions, self.text_encoder_names)
        config = base_module(self.transformer).config  # a part left out (include: false) reads zeros of its output's shape
        present = {part: self.encode_clip_pooled(part, texts[part], part in grad) for part in CLIP_PARTS if part in texts}
        widths = split_width(config.text_emb_dim, {part: p.shape[-1] for part, p in present.items()}, CLIP_PARTS)
        pooled = [present[part] if part in present else zeros(self.transformer, batch, widths[part]) for part in CLIP_PARTS]
        if T5_PART in texts:
            ids, mask = self._tokens(T5_PART, texts[T5_PART])
            on_meta = module_device(self.text_encoder_3).type == "meta"  # the probe: as for Llama, no padding mask
            t5 = self.padding_zeroed(self.t5_hidden_states(T5_PART, ids, None if on_meta else mask, grad=T5_PART in grad), mask)
        else:
            t5 = zeros(self.transformer, batch, SEQUENCE_LENGTH, config.caption_channels[0])
        llama = self.encode_llama(texts[LLAMA_PART], LLAMA_PART in grad) if LLAMA_PART in texts else \
            zeros(self.transformer, batch, max(config.llama_layers) + 1, SEQUENCE_LENGTH, config.caption_channels[1])
        device = t5.device
        return {"pooled_embeds": torch.cat([p.to(device) for p in pooled], dim=-1), "t5": t5, "llama": llama.to(device)}

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, 16, H, W) for noisy latents at noise fraction `t` (B,): the transformer
        reads 2x2 patches with all-ones masks (OneTrainer's input) and returns the negative velocity."""
        transformer, module = self.transformer, base_module(self.transformer)
        device, dtype = module_device(transformer), input_dtype(transformer)
        b, _, h, w = noisy.shape
        rows, cols = h // 2, w // 2
        self._route_experts_for_training(torch.is_grad_enabled())
        ids = torch.zeros(rows, cols, 3, device=device)
        ids[..., 1] += torch.arange(rows, device=device)[:, None]
        ids[..., 2] += torch.arange(cols, device=device)[None, :]
        with _experts_on_meta(module) if device.type == "meta" else contextlib.nullcontext():
            out = transformer(
                hidden_states=pack_patches(noisy.to(device, dtype)), timesteps=(t.to(device, torch.float32) * 1000).expand(b),
                encoder_hidden_states_t5=conditioning["t5"].to(device, dtype),
                encoder_hidden_states_llama3=conditioning["llama"].to(device, dtype).transpose(0, 1),
                pooled_embeds=conditioning["pooled_embeds"].to(device, dtype),
                hidden_states_masks=torch.ones(b, rows * cols, device=device, dtype=dtype),
                img_sizes=[(rows, cols)] * b,
                img_ids=ids.reshape(1, rows * cols, 3).repeat(b, 1, 1).to(dtype), return_dict=False,
            )[0]
        if module.training and not module.config.force_inference_output:
            out = unpack_training_output(out, h, w)
        return -out

    def _route_experts_for_training(self, training: bool) -> None:
        """The mixture-of-experts layers in their training mode while gradients are taken: in eval
        mode they route tokens under no_grad, so the routed experts (and what lies before them)
        would get no gradient; sampling and validation keep the eval routing."""
        from diffusers.models.transformers.transformer_hidream_image import MOEFeedForwardSwiGLU, MoEGate

        for module in base_module(self.transformer).modules():
            if isinstance(module, (MOEFeedForwardSwiGLU, MoEGate)):
                module.training = training

    # ---------------------------------------------------------------- sampling

    def pipeline_inputs(self, prompt: str, negative_prompt: str, cfg_scale: float) -> dict:
        """Our embeddings (the pipeline's layout: Llama's layers first) and, with CFG (scale > 1),
        the negative prompt's."""
        dtype = compute_dtype(self.transformer)

        def embeds(text: str, prefix: str) -> dict:
            cond = self.encode_text([text])
            return {f"{prefix}prompt_embeds_t5": cond["t5"].to(dtype),
                    f"{prefix}prompt_embeds_llama3": cond["llama"].transpose(0, 1).to(dtype),
                    f"{prefix}pooled_prompt_embeds": cond["pooled_embeds"].to(dtype)}

        inputs = {**embeds(prompt, ""), "guidance_scale": float(cfg_scale)}
        if cfg_scale > 1:
            inputs.update(embeds(negative_prompt or "", "negative_"))
        return inputs

    def sample(self, prompt: str, negative_prompt: str = "", height: int = 1024, width: int = 1024, **options):
        """FlowFamily.sample at the requested size (see `pipeline`)."""
        self._sample_px = generation_size(height, width, self.bucket_step)
        return super().sample(prompt, negative_prompt, height, width, **options)

    def pipeline(self):
        """The pipeline whose target area is the sample's own (it rescales every size to
        `default_sample_size` latent pixels square; a hair more keeps the size after its flooring)."""
        pipe = super().pipeline()
        h, w = self._sample_px
        pipe.default_sample_size = (math.sqrt(h * w) + 0.5) / pipe.vae_scale_factor
        return pipe
