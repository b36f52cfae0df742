"""Flux.2's layer names: diffusers' Flux2Transformer2DModel path -> the original (Black Forest
Labs) key, without torch, for the key map (models/flux2_keys.py) and ComfyUI's LoRA layer names
(models/comfy_lora_names.py). `transformer_blocks.N.<a>` is `double_blocks.N.<DOUBLE[a]>`,
`single_transformer_blocks.N.<a>` is `single_blocks.N.<SINGLE[a]>`; TOP holds the shared layers.
(The double blocks' q/k/v are rows of a fused weight and `norm_out.linear` has its halves swapped:
models/flux2_keys.py places those.)
"""

from __future__ import annotations

from ot_gradio.models.bfl_names import DOUBLE_ATTENTION, DOUBLE_NORMS, EMBEDDERS, SINGLE_NORMS

DOUBLE = {
    **DOUBLE_ATTENTION,
    "ff.linear_in": "img_mlp.0", "ff.linear_out": "img_mlp.2",
    "ff_context.linear_in": "txt_mlp.0", "ff_context.linear_out": "txt_mlp.2",
    **DOUBLE_NORMS,
}
SINGLE = {"attn.to_qkv_mlp_proj": "linear1", "attn.to_out": "linear2", **SINGLE_NORMS}
TOP = {
    **EMBEDDERS,
    "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
    "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
    "single_stream_modulation.linear": "single_stream_modulation.lin",
}
# diffusers layers ComfyUI's Flux key map does not name (Flux.1 calls them time_text_embed, and
# Flux.1 blocks carry their own modulation)
COMFY_UNMAPPED = ("time_guidance_embed.", "double_stream_modulation_img.", "double_stream_modulation_txt.",
                  "single_stream_modulation.")

# The layers a kohya LoRA names by their original key (`lora_unet_...`, which every ComfyUI maps):
# the blocks' MLPs, the single blocks' fused projections, and the shared layers above.
ORIGINAL_NAMED_DOUBLE = {a: b for a, b in DOUBLE.items() if a.startswith(("ff.", "ff_context."))}
ORIGINAL_NAMED_SINGLE = {a: b for a, b in SINGLE.items() if not a.startswith("attn.norm_")}
ORIGINAL_NAMED_TOP = {a: b for a, b in TOP.items() if a.startswith(COMFY_UNMAPPED)}
