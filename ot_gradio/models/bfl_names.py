"""The layer names Flux.1 and Flux.2 share (Black Forest Labs' original keys), as diffusers' path
-> the original key, without torch: Flux.1's key map (models/flux_keys.py) and Flux.2's names
(models/flux2_names.py) are built from them.
"""

from __future__ import annotations

# a double block's attention outputs and q/k norms (`transformer_blocks.N.<a>` -> `double_blocks.N.<b>`)
DOUBLE_ATTENTION = {"attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj"}
DOUBLE_NORMS = {
    "attn.norm_q": "img_attn.norm.query_norm", "attn.norm_k": "img_attn.norm.key_norm",
    "attn.norm_added_q": "txt_attn.norm.query_norm", "attn.norm_added_k": "txt_attn.norm.key_norm",
}
# a single block's q/k norms (`single_transformer_blocks.N.<a>` -> `single_blocks.N.<b>`)
SINGLE_NORMS = {"attn.norm_q": "norm.query_norm", "attn.norm_k": "norm.key_norm"}
# the image and text embedders and the output projection
EMBEDDERS = {"x_embedder": "img_in", "context_embedder": "txt_in", "proj_out": "final_layer.linear"}
