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
- Loading: a hub id (Efficient-Large-Model/Sana_1600M_1024px_diffusers), a diffusers folder,
  `tiny:sana`, or the original transformer checkpoint (`Sana_1600M_1024px.pth` or a
  `.safetensors` of it) through diffusers' `from_single_file` converter, the text encoder, VAE and
  configs from a diffusers folder or the hub repo. Saving a single file is refused (output the
  diffusers folder): the original layout also holds the null caption embedding and the position
  table, which a diffusers model does not keep, so it could not be written faithfully.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import QWEN_PRESETS, base_module, compute_dtype, input_dtype, module_device, module_dtype
from ot_gradio.models.flow_family import FlowFamily, TokenWindow, flow_training_scheduler
from ot_gradio.models.lora_module_names import IdentityLoraNames
from ot_gradio.models.registry import register_family

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
class Sana(TokenWindow, IdentityLoraNames, FlowFamily):
    """The family interface (models/base.py, models/flow_family.py) and the flow contract for Sana."""
    fp16_unstable = ("text_encoder", "vae")  # as OneTrainer: the LLM and the DC-AE overflow in float16

    embedding_keys = {"text_encoder": "gemma"}  # OneTrainer's key (its SanaEmbeddingSaver)
    output_embedding_parts = ("text_encoder",)
    patch_size = None  # the transformer config's
    single_file_layout = "original"  # Sana's own checkpoint, read by diffusers' converter; not written
    single_file_suffixes = (".safetensors", ".pth", ".pt")  # the published checkpoints are .pth
    lora_layer_presets = {"transformer": TRANSFORMER_PRESETS, "text_encoder": QWEN_PRESETS}
    default_sequence_length = DEFAULT_SEQUENCE_LENGTH  # the token window after the instruction
    default_steps, default_cfg_scale = 20, 4.5

    def __init__(self, components: Mapping):
        super().__init__(components)
        self.tokenizer.padding_side = "right"  # as the pipeline sets it
        # `scheduler` is what samples use (DPM-Solver flow in the real repos); training draws t with FlowMatchEuler
        self.noise_scheduler = flow_training_scheduler(self.scheduler)
        self.text_encoder_sequence_length = DEFAULT_SEQUENCE_LENGTH

    # ---------------------------------------------------------------- loading

    pipeline_class_name = "SanaPipeline"
    transformer_class_name = "SanaTransformer2DModel"

    # ---------------------------------------------------------------- parts and options

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
            hidden = self.output_embedded("text_encoder", ids, hidden)
        if instruction:
            keep = torch.tensor([0, *range(window - length + 1, window)], device=device)
            hidden, mask = hidden[:, keep], mask[:, keep]
        return {"encoder_hidden_states": hidden, "attention_mask": mask}

    # ---------------------------------------------------------------- training

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) for noisy latents at noise fraction `t` (B,); the transformer
        reads the timestep as t * 1000 * timestep_scale."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
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

    def sample_options(self) -> dict:
        return {"use_resolution_binning": False, "max_sequence_length": self.text_encoder_sequence_length}
