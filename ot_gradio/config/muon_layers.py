"""Which weights the Muon optimizers (MUON, MUON_ADV, ADAMUON_ADV) orthogonalise, as OneTrainer splits them.

Muon suits the 2-D weight matrices of the hidden layers; the rest (biases, norms, embeddings, the
first and last layers) trains with an AdamW inside the same optimizer ("Muon with Adam"). A weight
goes to Muon when its name (``<part>.<module path>.<weight>``, e.g. ``unet.down_blocks.0...lora_B.weight``)
contains one of the hidden-layer patterns and it is not 1-D. The patterns are the user's
``muon_hidden_layers`` (comma-separated, regular expressions with ``muon_adam_regex``), else the
model type's default below (OneTrainer's, from its optimizer/muon_util.py).
"""

from __future__ import annotations

import re
from typing import Any

from .enums import ModelType as M
from .enums import Optimizer as O

MUON_OPTIMIZERS = frozenset({O.MUON, O.MUON_ADV, O.ADAMUON_ADV})

_UNET = ("block", "text_model.encoder.layers")  # UNet blocks, CLIP layers
_TRANSFORMER = ("transformer_blocks", "encoder.block")  # DiT blocks, T5 blocks
_LAYERS = ("layers", "refiner")
DEFAULT_HIDDEN_LAYERS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("STABLE_DIFFUSION_15", "STABLE_DIFFUSION_15_INPAINTING", "STABLE_DIFFUSION_20_BASE",
                     "STABLE_DIFFUSION_20_INPAINTING", "STABLE_DIFFUSION_20", "STABLE_DIFFUSION_21", "STABLE_DIFFUSION_21_BASE",
                     "STABLE_DIFFUSION_XL_10_BASE", "STABLE_DIFFUSION_XL_10_BASE_INPAINTING", "STABLE_CASCADE_1",
                     "WUERSTCHEN_2"), _UNET),
    # FLUX_FILL_DEV_1 is Flux's architecture (OneTrainer lists no default for it)
    **dict.fromkeys(("STABLE_DIFFUSION_3", "STABLE_DIFFUSION_35", "SANA", "FLUX_DEV_1", "FLUX_FILL_DEV_1", "FLUX_2", "CHROMA_1",
                     "QWEN", "PIXART_ALPHA", "PIXART_SIGMA", "ANIMA"), _TRANSFORMER),
    "HI_DREAM_FULL": ("caption_projection", "double_stream_blocks", "single_stream_blocks"),
    **dict.fromkeys(("Z_IMAGE", "ERNIE", "IDEOGRAM_4"), _LAYERS),
    "KREA_2": ("transformer_blocks", "text_fusion.layerwise_blocks", "text_fusion.refiner_blocks"),
}


def hidden_layer_patterns(model_type: M | str, optimizer_config: Any) -> tuple[list[str], bool]:
    """(patterns, they are regular expressions) for the weights Muon trains; ValueError naming the field."""
    layers = optimizer_config.muon_hidden_layers
    if layers is not None and layers.strip():
        patterns = [p.strip() for p in layers.split(",") if p.strip()]
        regex = bool(optimizer_config.muon_adam_regex)
        for p in patterns if regex else ():
            try:
                re.compile(p)
            except re.error as err:
                raise ValueError(f"optimizer.muon_hidden_layers: {p!r} is not a regular expression ({err}); "
                                 "fix it or turn off Muon layers are regex") from err
        return patterns, regex
    name = model_type.value if isinstance(model_type, M) else str(model_type)
    if name not in DEFAULT_HIDDEN_LAYERS:
        raise ValueError(f"optimizer.muon_hidden_layers: there is no default list of hidden layers for {name}; "
                         "list the layers Muon should train (e.g. transformer_blocks)")
    return list(DEFAULT_HIDDEN_LAYERS[name]), False


def is_muon_weight(name: str, ndim: int, patterns: list[str], regex: bool) -> bool:
    """OneTrainer's rule: a hidden layer's weight that is a matrix (or a conv kernel)."""
    if ndim < 2:
        return False
    return any((re.search(p, name) is not None) if regex else (p in name) for p in patterns)
