"""OFT v2 (`peft_type` OFT_2) as OneTrainer trains it, on peft's OFT layers.

peft's `OFTConfig` builds the layers (`oft_R`: one `OFTRotationModule` per layer, its `weight`
holding the upper triangle of each skew-symmetric block, started at zero, with OneTrainer's and
peft's adjustment of a block size that does not divide the layer's inputs) and its Cayley-Neumann
series (5 terms) makes the rotations. Our forward replaces peft's where peft computes something
else than OneTrainer:

- Scaled OFT (`oft_scaled`): OneTrainer divides the weight by 2·sqrt(block size - 1) before the
  Cayley step (so one learning rate suits every block size) and marks such a layer with an
  `oft_R.scaled_oft` entry in the file; peft has no such option.
- Convolutions: OneTrainer rotates the kernel (W' = W·R over each output's flattened
  in·kh·kw inputs); peft 0.21 unfolds and folds the input instead, which sums overlapping
  patches and changes a layer's output before any training.
- Dropout (`dropout_probability`): OneTrainer replaces each block by the identity with that
  probability (a Bernoulli draw per block, none when the blocks are shared); peft 0.21's layers
  do not apply their `module_dropout` at all.

Linear layers rotate their input in blocks, x' = x·R (W' = W·Rᵀ), exactly as peft and OneTrainer
do. Files hold OneTrainer's entries `<layer>.oft_R.weight` (blocks x block·(block-1)/2) and, for
Scaled OFT, `<layer>.oft_R.scaled_oft`, with no alpha: what OneTrainer writes and reads back and
what the ComfyUI-OFTv2 node loads (ComfyUI's own `oft_blocks` adapter rotates output rows with an
exact Cayley transform, so it cannot express OFT v2). `merged_weight` is the same rotation applied
to a full weight, for the convert tool.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

OFT_2 = "OFT_2"
OFT_WEIGHT = "oft_R.weight"
OFT_SCALED = "oft_R.scaled_oft"
OFT_KEYS = (OFT_WEIGHT, OFT_SCALED)
NEUMANN_TERMS = 5  # OneTrainer's and peft's default


def block_size_of(vec: torch.Tensor) -> int:
    """The block size b of an `oft_R.weight` of b·(b-1)/2 entries per block."""
    n = int(vec.shape[-1])
    b = int(round((1 + math.sqrt(1 + 8 * n)) / 2))
    if b * (b - 1) // 2 != n:
        raise ValueError(f"An OFT weight of {n} entries per block is not a block's upper triangle.")
    return b


def divisor(block_size: int, scaled: bool) -> float:
    return 2 * math.sqrt(block_size - 1) if scaled else 1.0


def rotations(vec: torch.Tensor, scaled: bool, module: nn.Module | None = None) -> torch.Tensor:
    """(blocks, b, b) rotations from an `oft_R.weight`, by peft's Cayley-Neumann step."""
    from peft.tuners.oft.layer import OFTRotationModule

    b = block_size_of(vec)
    if module is None:
        module = OFTRotationModule(vec.shape[0], vec.shape[1], b, vec.shape[0] * b).to(vec.device)
    return module._cayley_batch(vec / divisor(b, scaled), b, True, NEUMANN_TERMS)


def block_dropout(blocks: torch.Tensor, p: float) -> torch.Tensor:
    """Each block replaced by the identity with probability p (none when one block is shared)."""
    if p <= 0 or blocks.shape[0] == 1:
        return blocks
    keep = torch.empty(blocks.shape[0], 1, 1, device=blocks.device, dtype=blocks.dtype).bernoulli_(1.0 - p)
    eye = torch.eye(blocks.shape[-1], device=blocks.device, dtype=blocks.dtype)
    return keep * blocks + (1 - keep) * eye


def _rotate_columns(weight: torch.Tensor, blocks: torch.Tensor, conv: bool) -> torch.Tensor:
    """W·R (convolution, over the flattened kernel) or W·Rᵀ (linear), R block-diagonal."""
    count, b = weight[0].numel() // blocks.shape[-1], blocks.shape[-1]
    if blocks.shape[0] == 1:
        blocks = blocks.expand(count, b, b)
    if not conv:
        blocks = blocks.transpose(-1, -2)
    w = weight.reshape(weight.shape[0], count, b).to(blocks.dtype)
    return torch.einsum("ork,rkc->orc", w, blocks).reshape(weight.shape)


def merged_weight(weight: torch.Tensor, tensors: Mapping[str, torch.Tensor], strength: float = 1.0) -> torch.Tensor:
    """The layer's weight as OFT v2 trained it, at `strength`: W + strength·(W' - W)."""
    w = weight.float()
    blocks = rotations(tensors[OFT_WEIGHT].float(), OFT_SCALED in tensors)
    rotated = _rotate_columns(w, blocks, conv=w.dim() == 4)
    return w + strength * (rotated - w)


def spec_fields(layers) -> dict:
    """AdapterSpec's OFT fields that rebuild the layers of a file (peft form): a block size every
    layer is as peft fits it to its inputs (`other_block_sizes`), the most common one that is (the
    most common of the layers of several blocks when none is: `oft_sizes_refusal` names the others),
    shared blocks when every layer has one, Scaled OFT when the layers carry its marker."""
    from collections import Counter

    layers = list(layers)
    shared = bool(layers) and all(t[OFT_WEIGHT].shape[0] == 1 for t in layers)
    sizes = Counter(block_size_of(t[OFT_WEIGHT]) for t in layers)
    size = sizes.most_common(1)[0][0] if sizes else 32
    if not shared and layers:
        by_index = dict(enumerate(layers))
        fits = [b for b, _ in sizes.most_common() if not other_block_sizes(by_index, b)]
        several = Counter(block_size_of(t[OFT_WEIGHT]) for t in layers if t[OFT_WEIGHT].shape[0] > 1)
        size = fits[0] if fits else several.most_common(1)[0][0]
    return {"oft_block_size": size, "oft_block_share": shared, "oft_scaled": any(OFT_SCALED in t for t in layers)}


def other_block_sizes(layers: Mapping[Any, Mapping[str, torch.Tensor]], block_size: int) -> dict[Any, int]:
    """The layers (path -> block size) whose blocks are not `block_size` as peft fits it to their inputs
    (blocks x block size; peft changes a size only where it does not divide them): layers one
    `oft_block_size` cannot rebuild. Beside layers of several blocks (no shared block) a layer of one
    block is one block over its whole input (peft's size for a block size at least its inputs), judged
    as the others; in a file of one block per layer each may be a shared block, which does not tell
    its layer's inputs: none judged."""
    from peft.tuners.oft.layer import OFTLayer

    if all(t[OFT_WEIGHT].shape[0] == 1 for t in layers.values()):
        return {}
    out = {}
    for path, tensors in layers.items():
        vec = tensors[OFT_WEIGHT]
        size, inputs = block_size_of(vec), int(vec.shape[0]) * block_size_of(vec)
        # peft's own adjustment (a method that uses nothing of its layer)
        fitted = block_size if inputs % block_size == 0 else OFTLayer.adjust_oft_parameters(None, inputs, block_size)
        if size != fitted:
            out[path] = size
    return out


# -- layers ---------------------------------------------------------------------------------


def peft_config(*, block_size: int, block_share: bool, targets: list[str]):
    from peft import OFTConfig

    return OFTConfig(
        r=0, oft_block_size=block_size, block_share=block_share, coft=False, module_dropout=0.0,
        use_cayley_neumann=True, num_cayley_neumann_terms=NEUMANN_TERMS, init_weights=True, target_modules=targets,
    )


def _layer_rotations(layer: nn.Module, adapter: str) -> torch.Tensor:
    module = layer.oft_R[adapter]
    blocks = rotations(module.weight, layer.oft_scaled, module)
    return block_dropout(blocks, layer.oft_block_dropout) if layer.training else blocks


def _plain_call(layer: nn.Module, adapter: str) -> bool:
    """Adapters off, merged or another adapter active: peft's forward (the base layer's)."""
    return layer.disable_adapters or layer.merged or list(layer.active_adapters) != [adapter]


def _linear_forward(self: nn.Module, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    adapter = self.active_adapters[0]
    if _plain_call(self, adapter):
        return type(self).forward(self, x, *args, **kwargs)
    blocks = _layer_rotations(self, adapter)
    count, b = self.in_features // blocks.shape[-1], blocks.shape[-1]
    if blocks.shape[0] == 1:
        blocks = blocks.expand(count, b, b)
    rotated = torch.einsum("...rk,rkc->...rc", x.to(blocks.dtype).reshape(*x.shape[:-1], count, b), blocks)
    return self.base_layer(rotated.reshape(x.shape).to(x.dtype), *args, **kwargs)


def _conv_forward(self: nn.Module, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    adapter = self.active_adapters[0]
    if _plain_call(self, adapter):
        return type(self).forward(self, x, *args, **kwargs)
    if args or kwargs:
        raise TypeError(f"An OFT convolution takes its input only, got {len(args)} more argument(s) and {sorted(kwargs)}.")
    base = self.get_base_layer()
    weight = _rotate_columns(base.weight, _layer_rotations(self, adapter), conv=True)
    return base._conv_forward(x, weight.to(base.weight.dtype), base.bias)


def is_oft_layer(layer: nn.Module) -> bool:
    from peft.tuners.oft.layer import OFTLayer

    return isinstance(layer, OFTLayer)


def install_oft(module: nn.Module, *, scaled: bool, dropout: float) -> None:
    """OneTrainer's OFT v2 forward (see the module's notes) on every peft OFT layer of `module`."""
    from peft.tuners.oft import layer as oft_layer

    for layer in module.modules():
        if not isinstance(layer, oft_layer.OFTLayer):
            continue
        if not isinstance(layer, (oft_layer.Linear, oft_layer.Conv2d)):
            raise ValueError(f"OFT_2 trains linear and convolution layers only, not {type(layer.get_base_layer()).__name__}.")
        layer.oft_scaled, layer.oft_block_dropout = bool(scaled), float(dropout)
        forward = _linear_forward if isinstance(layer, oft_layer.Linear) else _conv_forward
        layer.forward = types.MethodType(forward, layer)


def state_extras(layer: nn.Module) -> dict[str, torch.Tensor]:
    """The Scaled OFT marker OneTrainer writes beside a scaled layer's weight."""
    return {OFT_SCALED: torch.tensor(True)} if getattr(layer, "oft_scaled", False) else {}


def oft_sizes_refusal(path: Any, layers: Mapping[str, Any], other: Mapping[str, int], size: int) -> str:
    """Why an OFT file of several block sizes cannot continue, naming its layers and what to do instead."""
    sizes: dict[int, list[str]] = {}
    for name in layers:
        sizes.setdefault(other.get(name, size), []).append(name)
    listed = "; ".join(f"block size {b}: {len(names)} layer(s) ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
                       for b, names in sorted(sizes.items(), key=lambda item: (-len(item[1]), item[0])))
    whole = [name for name in other if layers[name][OFT_WEIGHT].shape[0] == 1]
    if whole:  # one block over a layer's whole input: trained with a block size at least its inputs
        listed += (f"; {len(whole)} of them one block over the layer's whole input ({', '.join(whole[:3])}"
                   f"{', ...' if len(whole) > 3 else ''}), from an oft_block_size at least the layer's inputs")
    return (f"lora_model_name: {path}: OFT layers of different block sizes ({listed}). An OFT continues with one "
            "oft_block_size (peft changes it only where it does not divide a layer's inputs), and one block size "
            "cannot stand for another: smaller blocks cannot hold a larger block's rotation, and larger ones would "
            "hold the file's rotations but also train rotations across its blocks, which the file does not have. "
            "Merge the file into the base model with Tools > Convert (merge) and train a new OFT on the merged "
            "model, or continue from a file trained with one oft_block_size")
