"""SD 3 / 3.5 single files in Stability AI's layout (what `StableDiffusion3Pipeline.from_single_file`,
ComfyUI and Forge read): the MMDiT under `model.diffusion_model.` with fused q/k/v
(`joint_blocks.N.x_block.attn.qkv`) and the VAE under `first_stage_model.`, as
sd3.5_large.safetensors ships them. The inverse of diffusers'
convert_sd3_transformer_checkpoint_to_diffusers, checked tensor by tensor in the tests.

Each text encoder the model holds goes in too, as OneTrainer's converter writes them and SAI's
`incl_clips` files hold them: `text_encoders.clip_l.transformer.`, `.clip_g.transformer.` (both
transformers' CLIPTextModelWithProjection names, under `text_model.` and `text_projection.weight`)
and `.t5xxl.transformer.` (T5EncoderModel's names, the tied embedding as `shared.weight`, by which
diffusers finds T5, and again as `encoder.embed_tokens.weight`, as OneTrainer writes it). A text
encoder left out (`include` off) is not loaded, so not written; readers take it from elsewhere.
diffusers' reader gives CLIP-L the identity as its projection whatever the file holds (SAI's
reference code does so when the file has none); ComfyUI's CLIP loads the file's, and so does this
trainer (models/sd3.py), so a trained projection is kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from ot_gradio.models.common import cast_state_dict, plain_state_dict, torch_dtype
from ot_gradio.models.sd_single_file import VAE_PREFIX, vae_to_original

TRANSFORMER_PREFIX = "model.diffusion_model."
TEXT_ENCODER_PREFIXES = {"text_encoder": "text_encoders.clip_l.transformer.", "text_encoder_2": "text_encoders.clip_g.transformer.",
                         "text_encoder_3": "text_encoders.t5xxl.transformer."}
CLIP_L_PROJECTION = TEXT_ENCODER_PREFIXES["text_encoder"] + "text_projection.weight"
_T5_EMBEDDING = ("shared.weight", "encoder.embed_tokens.weight")

_BASIC = {
    "pos_embed.pos_embed": "pos_embed", "pos_embed.proj": "x_embedder.proj", "context_embedder": "context_embedder",
    "time_text_embed.timestep_embedder.linear_1": "t_embedder.mlp.0",
    "time_text_embed.timestep_embedder.linear_2": "t_embedder.mlp.2",
    "time_text_embed.text_embedder.linear_1": "y_embedder.mlp.0",
    "time_text_embed.text_embedder.linear_2": "y_embedder.mlp.2",
    "proj_out": "final_layer.linear",
}
_BLOCK = {
    "attn.to_out.0": "x_block.attn.proj", "attn.to_add_out": "context_block.attn.proj",
    "attn.norm_q": "x_block.attn.ln_q", "attn.norm_k": "x_block.attn.ln_k",
    "attn.norm_added_q": "context_block.attn.ln_q", "attn.norm_added_k": "context_block.attn.ln_k",
    "attn2.to_out.0": "x_block.attn2.proj", "attn2.norm_q": "x_block.attn2.ln_q", "attn2.norm_k": "x_block.attn2.ln_k",
    "norm1.linear": "x_block.adaLN_modulation.1", "norm1_context.linear": "context_block.adaLN_modulation.1",
    "ff.net.0.proj": "x_block.mlp.fc1", "ff.net.2": "x_block.mlp.fc2",
    "ff_context.net.0.proj": "context_block.mlp.fc1", "ff_context.net.2": "context_block.mlp.fc2",
}
# fused projections: original name -> the diffusers layers concatenated into it
_FUSED = {"x_block.attn.qkv": ("attn.to_q", "attn.to_k", "attn.to_v"),
          "context_block.attn.qkv": ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"),
          "x_block.attn2.qkv": ("attn2.to_q", "attn2.to_k", "attn2.to_v")}


def _swap_scale_shift(t: torch.Tensor) -> torch.Tensor:
    """diffusers' AdaLayerNormContinuous orders (scale, shift), the original (shift, scale)."""
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


def transformer_to_original(state_dict: Mapping[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """SD3Transformer2DModel weights -> original MMDiT names (without the prefix); every weight is
    written (an unknown one is an error, so nothing is silently dropped)."""
    sd = dict(state_dict)
    out: dict[str, torch.Tensor] = {}
    for i in range(num_layers):
        src, dst = f"transformer_blocks.{i}.", f"joint_blocks.{i}."
        for fused, layers in _FUSED.items():
            for end in ("weight", "bias"):
                keys = [f"{src}{layer}.{end}" for layer in layers]
                if all(k in sd for k in keys):
                    out[f"{dst}{fused}.{end}"] = torch.cat([sd.pop(k) for k in keys], dim=0)
        last = i == num_layers - 1
        for name, original in _BLOCK.items():
            for end in ("weight", "bias"):
                key = f"{src}{name}.{end}"
                if key in sd:
                    value = sd.pop(key)
                    out[f"{dst}{original}.{end}"] = _swap_scale_shift(value) if last and name == "norm1_context.linear" else value
    for name, original in _BASIC.items():
        if name in sd:  # the position embedding buffer
            out[original] = sd.pop(name)
        for end in ("weight", "bias"):
            if f"{name}.{end}" in sd:
                out[f"{original}.{end}"] = sd.pop(f"{name}.{end}")
    for end in ("weight", "bias"):
        out[f"final_layer.adaLN_modulation.1.{end}"] = _swap_scale_shift(sd.pop(f"norm_out.linear.{end}"))
    if sd:
        raise ValueError(f"SD 3 transformer weights with no place in the single-file layout: {sorted(sd)[:5]}")
    return out


def text_encoder_to_original(part: str, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A text encoder's weights under the names the single files hold (without the part's prefix):
    CLIP's under `text_model.`, which a flattened CLIP text model (transformers >= 5.6) lacks; T5's
    embedding under both its names, as two tensors (safetensors writes no shared ones): the one its
    encoder reads, should the two be untied."""
    weights = plain_state_dict(module, part)
    if part == "text_encoder_3":
        embedding = next(weights[k] for k in reversed(_T5_EMBEDDING) if k in weights)
        return {**weights, "shared.weight": embedding, "encoder.embed_tokens.weight": embedding.clone()}
    return {k if k.startswith(("text_model.", "text_projection.")) else "text_model." + k: v
            for k, v in weights.items() if not k.endswith(("position_ids", "logit_scale"))}


def save_sd3_single_file(path: str | os.PathLike, transformer: torch.nn.Module, vae: torch.nn.Module, dtype=None,
                         metadata: Mapping[str, str] | None = None,
                         text_encoders: Mapping[str, torch.nn.Module] | None = None) -> Path:
    """The transformer, the VAE and `text_encoders` (part -> its module: those the model holds) in
    SAI's single-file layout, all in `dtype`, written atomically."""
    from ot_gradio.models.key_layout import save_tensors

    dt = None if dtype is None else torch_dtype(dtype)
    state = {TRANSFORMER_PREFIX + k: v for k, v in transformer_to_original(transformer.state_dict(), transformer.config.num_layers).items()}
    state.update({VAE_PREFIX + k: v for k, v in vae_to_original(vae.state_dict(), vae.config).items()})
    for part, module in dict(text_encoders or {}).items():
        state.update({TEXT_ENCODER_PREFIXES[part] + k: v for k, v in text_encoder_to_original(part, module).items()})
    return save_tensors(path, cast_state_dict(state, dt), metadata or {})
