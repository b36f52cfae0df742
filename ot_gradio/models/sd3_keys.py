"""LoRA key names of Stable Diffusion 3 / 3.5, as OneTrainer writes them and ComfyUI reads them.

KOHYA_LORA (OneTrainer's SD 3 layout, comfy/lora.py "OneTrainer SD3 lora"):
- transformer: `lora_transformer_` + the diffusers module path with `_` for `.`
  (`lora_transformer_transformer_blocks_0_attn_to_q`); ComfyUI maps these through its
  MMDiT <-> diffusers table (q/k/v into slices of the fused qkv).
- CLIP-L `lora_te1_text_model_encoder_layers_N_...`, CLIP-G `lora_te2_...` (SDXL's names), T5
  `lora_te3_encoder_block_N_layer_M_SelfAttention_q` (ComfyUI numbers T5 after the CLIPs present).
Every file carries `<name>.alpha`, so ComfyUI scales each layer as trained.

DIFFUSERS_LORA (SAFETENSORS): `transformer.<path>.lora_A.weight`, `text_encoder.` and
`text_encoder_2.` likewise, with the adapter config in the metadata; StableDiffusion3Pipeline's
`load_lora_weights` reads all of it. It has no place for T5 (SD3LoraLoaderMixin loads the
transformer and the two CLIPs only), so a T5 LoRA is refused for that format before training,
and ComfyUI reads these files at alpha = rank (they have no alpha tensors).

The `_`-joined kohya names cannot be split back into module paths by rule (`time_text_embed`,
`add_q_proj`, `ff_context`...), so the family gives the identity renames of its layers
(`module_names`), which lora_format reads files with.
"""

from __future__ import annotations

from typing import Any

from ot_gradio.models.common import base_module
from ot_gradio.models.key_layout import layer_paths

KOHYA_PREFIXES = {
    "transformer": "lora_transformer_",
    "text_encoder": "lora_te1_",
    "text_encoder_2": "lora_te2_",
    "text_encoder_3": "lora_te3_",
}


def module_names(model: Any) -> dict[str, dict[str, str]]:
    """part -> {module path: module path} for the transformer and T5, whose `_`-joined names need
    the model to be read back (CLIP names are read by rule, as for SDXL)."""
    return {part: {p: p for p in layer_paths(base_module(getattr(model, part)))} for part in ("transformer", "text_encoder_3")
            if part in model.parts}  # (T5 left out of the run: include false)


def check_lora_output(config: Any) -> None:
    """A T5 LoRA saved with diffusers keys would be dropped by the pipeline's loader: refused."""
    from ot_gradio.config.enums import ModelFormat, TrainingMethod
    from ot_gradio.config.families import lora_layout

    if (
        TrainingMethod(config.training_method) == TrainingMethod.LORA
        and config.text_encoder_3.train
        and lora_layout(config.model_type, config.output_model_format) == "diffusers"
    ):
        raise ValueError(
            f"text_encoder_3.train: a T5 LoRA cannot be saved as {ModelFormat(config.output_model_format).value} (diffusers keys): StableDiffusion3Pipeline "
            "loads LoRA into the transformer and the two CLIP encoders only; save as KOHYA_LORA (OneTrainer's layout, "
            "which ComfyUI reads) or turn off training text encoder 3"
        )
