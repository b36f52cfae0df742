"""LoRA layers on q, k and v written as one layer on the original model's fused `qkv` (what
OneTrainer's KOHYA_LORA / COMFY_LORA files hold for the families whose original layout fuses them:
Ideogram 4, HunyuanVideo), and read back.

We train one adapter per diffusers Linear; their concatenated delta is exactly one LoRA on the
fused weight: its down (A) the three downs stacked, its up (B) the three ups block-diagonal, so
rank and alpha grow by the number of members and alpha / rank, hence every row of the delta, is
unchanged. A member the layer filter did not train is a zero block at the same rank (zero down
rows, zero up rows), so the fused delta is zero on its rows and reading drops it again. DoRA on
the output axis fuses as exactly (a magnitude and a norm per output row), but not in part (the
other rows' magnitudes would be the base weight's norms); DoRA on the input axis, LoHa, LoKr and
OFT do not fuse, and are refused.

Reading splits the fused up by rows into the members' widths (the model's: HunyuanVideo's
single-block `linear1` fuses q, k, v and its wider MLP input; equal parts where none are given).
A block-diagonal up (our own files) gives each member its own block, so the rank comes back (a
member whose down rows and block are all zero was not trained: dropped); any other (OneTrainer
trains one adapter on the fused layer) gives each member its rows of the up and the whole down,
at the file's rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ot_gradio.training.lora_variants import DORA_OUT, LORA_KEYS

_DOWN, _UP = LORA_KEYS


def _plain_or_output_dora(name: str, tensors: Mapping[str, torch.Tensor], what: str = "the fused q/k/v weight") -> None:
    if set(tensors) - {_DOWN, _UP, DORA_OUT}:
        raise ValueError(f"LoRA layer {name!r} is written on {what}, which takes a LoRA or a DoRA on the "
                         f"output axis only (got {sorted(tensors)}); train LoRA, or save as DIFFUSERS_LORA")


def fuse_layers(name: str, members: Sequence[Mapping[str, torch.Tensor] | None],
                widths: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
    """One peft-form layer (rank x len(members); write it at alpha x len(members)) whose delta is
    the members' deltas stacked by rows, in order. A member not trained (None: the layer filter
    took part of the fused weight) is a zero block at the same rank, its down rows zero too (so
    reading drops it again), `widths[i]` rows (None: as wide as the others); alpha / rank stays."""
    trained = [layer for layer in members if layer is not None]
    for layer in trained:
        _plain_or_output_dora(name, layer)
    if len({DORA_OUT in layer for layer in trained}) > 1:
        raise ValueError(f"LoRA layer {name!r}: its q, k and v layers are not all DoRA or all LoRA")
    if DORA_OUT in trained[0] and len(trained) < len(members):
        raise ValueError(f"LoRA layer {name!r} is one fused weight whose layers are trained only in part: DoRA would need the "
                         "base weight's norms for the rest; train all of them (see layer_filter), a plain LoRA, or save as "
                         "DIFFUSERS_LORA")
    down, up = trained[0][_DOWN], trained[0][_UP]
    if widths is not None and len(widths) != len(members):
        raise ValueError(f"LoRA layer {name!r}: {len(members)} layers but {len(widths)} widths")
    downs = [layer[_DOWN] if layer is not None else torch.zeros_like(down) for layer in members]
    ups = [(layer[_UP] if layer is not None else up.new_zeros(up.shape[0] if widths is None else widths[i], *up.shape[1:])).float()
           for i, layer in enumerate(members)]
    out = {_DOWN: torch.cat(downs),
           _UP: torch.block_diag(*[u.flatten(1) for u in ups]).reshape(sum(u.shape[0] for u in ups), -1, *ups[0].shape[2:]).to(up.dtype)}
    if DORA_OUT in trained[0]:
        out[DORA_OUT] = torch.cat([layer[DORA_OUT] for layer in trained])
    return out


def split_layer(name: str, tensors: Mapping[str, torch.Tensor], alpha: float | None, count: int,
                widths: Sequence[int] | None = None) -> list[tuple[dict[str, torch.Tensor], float | None] | None]:
    """The `count` member layers (each with its alpha) of fused layer `name`, as `fuse_layers`
    describes; their deltas at alpha / rank are the fused delta's row blocks, `widths` rows each
    (the members' output widths, from the model; None: equal parts). A block-diagonal member whose
    down and up are all zero was not trained (`fuse_layers`' zero block): None."""
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
    out: list[tuple[dict[str, torch.Tensor], float | None] | None] = []
    for i, block in enumerate(blocks):
        if diagonal:
            layer = {_DOWN: down[i * width:(i + 1) * width], _UP: block[:, i * width:(i + 1) * width]}
            layer_alpha = alpha / count  # the same alpha / rank at a rank count times smaller
            if DORA_OUT not in tensors and not torch.any(layer[_DOWN]) and not torch.any(layer[_UP]):
                out.append(None)
                continue
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
