"""LoRA layers on q, k and v written as one layer on the original model's fused `qkv` (what
OneTrainer's KOHYA_LORA / COMFY_LORA files hold for the families whose original layout fuses them:
Ideogram 4), and read back.

We train one adapter per diffusers Linear; their concatenated delta is exactly one LoRA on the
fused weight: its down (A) the three downs stacked, its up (B) the three ups block-diagonal, so
rank and alpha grow by the number of members and alpha / rank, hence every row of the delta, is
unchanged. DoRA on the output axis fuses as exactly (a magnitude and a norm per output row); DoRA
on the input axis, LoHa, LoKr and OFT do not, and are refused.

Reading splits the fused up by rows into the members' widths (the model's: HunyuanVideo's
single-block `linear1` fuses q, k, v and its wider MLP input; equal parts where none are given). A block-diagonal up (our own files) gives each member its own block, so
the rank comes back; any other (OneTrainer trains one adapter on the fused layer) gives each member
its rows of the up and the whole down, at the file's rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch

from ot_gradio.models.key_layout import fused_groups
from ot_gradio.training.lora_variants import DORA_OUT, LORA_KEYS

_DOWN, _UP = LORA_KEYS


def _plain_or_output_dora(name: str, tensors: Mapping[str, torch.Tensor], what: str = "the fused q/k/v weight") -> None:
    if set(tensors) - {_DOWN, _UP, DORA_OUT}:
        raise ValueError(f"LoRA layer {name!r} is written on {what}, which takes a LoRA or a DoRA on the "
                         f"output axis only (got {sorted(tensors)}); train LoRA, or save as DIFFUSERS_LORA")


def fuse_layers(name: str, members: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """One peft-form layer (rank x len(members); write it at alpha x len(members)) whose delta is
    the members' deltas stacked by rows, in order."""
    for layer in members:
        _plain_or_output_dora(name, layer)
    if len({DORA_OUT in layer for layer in members}) > 1:
        raise ValueError(f"LoRA layer {name!r}: its q, k and v layers are not all DoRA or all LoRA")
    ups = [layer[_UP].float() for layer in members]
    dtype = members[0][_UP].dtype
    out = {_DOWN: torch.cat([layer[_DOWN] for layer in members]),
           _UP: torch.block_diag(*[u.flatten(1) for u in ups]).reshape(sum(u.shape[0] for u in ups), -1, *ups[0].shape[2:]).to(dtype)}
    if DORA_OUT in members[0]:
        out[DORA_OUT] = torch.cat([layer[DORA_OUT] for layer in members])
    return out


def split_layer(name: str, tensors: Mapping[str, torch.Tensor], alpha: float | None, count: int,
                widths: Sequence[int] | None = None) -> list[tuple[dict[str, torch.Tensor], float | None]]:
    """The `count` member layers (each with its alpha) of fused layer `name`, as `fuse_layers`
    describes; their deltas at alpha / rank are the fused delta's row blocks, `widths` rows each
    (the members' output widths, from the model; None: equal parts)."""
    _plain_or_output_dora(name, tensors)
    down, up = tensors[_DOWN], tensors[_UP]
    rank = down.shape[0]
    if widths is None:
        if up.shape[0] % count:
            raise ValueError(f"LoRA layer {name!r}: its {up.shape[0]} output rows do not split into {count} equal parts")
        widths = [up.shape[0] // count] * count
    if len(widths) != count or sum(widths) != up.shape[0]:
        raise ValueError(f"LoRA layer {name!r}: its {up.shape[0]} output rows are not the model's {count} parts of "
                         f"{', '.join(map(str, widths))} rows (a LoRA of another model?)")
    starts = [sum(widths[:i]) for i in range(count)]
    blocks = [up[s:s + w] for s, w in zip(starts, widths, strict=True)]
    alpha = float(rank) if alpha is None else alpha
    width = rank // count
    diagonal = rank % count == 0 and all(
        not torch.any(b[:, :i * width]) and not torch.any(b[:, (i + 1) * width:]) for i, b in enumerate(blocks))
    out = []
    for i, block in enumerate(blocks):
        if diagonal:
            layer = {_DOWN: down[i * width:(i + 1) * width], _UP: block[:, i * width:(i + 1) * width]}
            layer_alpha = alpha / count  # the same alpha / rank at a rank count times smaller
        else:
            layer, layer_alpha = {_DOWN: down, _UP: block}, alpha
        if DORA_OUT in tensors:
            layer[DORA_OUT] = tensors[DORA_OUT][starts[i]:starts[i] + widths[i]]
        out.append(({k: v.contiguous() for k, v in layer.items()}, layer_alpha))
    return out


def swap_halves(name: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The layer whose delta is `tensors`' with its two halves of rows exchanged (a weight the
    original model keeps as (scale, shift) where diffusers keeps (shift, scale)): its up's rows
    (and an output-axis DoRA's magnitudes) swapped; it is its own inverse."""
    _plain_or_output_dora(name, tensors, "a weight whose halves the original model swaps")

    def swap(t: torch.Tensor) -> torch.Tensor:
        if t.shape[0] % 2:
            raise ValueError(f"LoRA layer {name!r}: {t.shape[0]} output rows have no two halves to swap")
        a, b = t.chunk(2, dim=0)
        return torch.cat([b, a]).contiguous()

    return {k: swap(v) if k in (_UP, DORA_OUT) else v for k, v in tensors.items()}


def check_whole_groups(names: Mapping[str, str], trained: Iterable[str]) -> None:
    """A fused weight's layers are trained all or none (a fused layer covers all its rows)."""
    trained = set(trained)
    for name, members in fused_groups(names).items():
        if len(members) > 1 and trained & set(members) and not set(members) <= trained:
            raise ValueError(f"LoRA layer {name!r} is one fused weight of {', '.join(members)}; train all of them or none "
                             f"(trained: {', '.join(m for m in members if m in trained)}; see layer_filter), or save as "
                             "DIFFUSERS_LORA")
