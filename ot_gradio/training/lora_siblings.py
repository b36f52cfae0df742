"""Sibling LoRA Linears that read one input, as one product in a training step.

An attention's q, k and v read the same input (a cross-attention's k and v the same text), each a
LoRA Linear of three products forward and five backward (`lora_forward._LoraLinear`), and autograd
sums the input's gradients from each in an `add` of its own. SD 1.5's 32 attentions and its text
encoder's 12 make about 340 of a step's ~3,350 operators that one product for the group would not,
and a small-batch step on a fast card waits on the CPU that launches its kernels
(docs/PERFORMANCE.md §17).

How a group is found and run:

- The first step that `lora_forward.step_casts` sees a layer in is recorded: every call of a
  one-node LoRA Linear with its input. A group is a run of two or more such calls in a row with the
  same input object whose layers are neighbours in the module order (`step_casts`' list): q, k, v
  of one attention, never layers of two blocks (which gradient checkpointing recomputes apart).
  Their frozen base weights (and biases) are then moved into one tensor each, the layers holding
  views of it (`_fuse`; the same values, the same memory), and `step_casts` lays the group's
  cast down weights side by side.
- From the next step, the first member called computes the whole group (`_LoraGroup`: the base
  and down products once for all, an `addmm` per member for its up product and sum) and leaves
  the others' outputs for them, keyed by the input: a member called with that very input takes its
  output, anything else computes as before. Gradient checkpointing recomputes the group the same
  way (the leader first, the input object shared).
- A group runs only while its weights are still side by side (a part moved to another device, or
  layer offloading, gives each weight a tensor of its own: the members then compute one by one),
  and only in `step_casts` (samples and the memory planner's probe compute layer by layer).

Results: the same sums of the same products, in other matrix shapes, so float rounding may differ
in the last bit; tests/training/test_lora_siblings.py compares against the layer-by-layer step.
"""

from __future__ import annotations

import torch
from torch import nn

ATTRIBUTE = "_lora_siblings"  # a member's group: its members in module order (set on each member)

_RECORD: list[tuple[nn.Module, torch.Tensor]] | None = None  # the calls of a recorded step
_STASH: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(member) -> (its input, its output) this step


def group_of(layer: nn.Module) -> tuple[nn.Module, ...] | None:
    return layer.__dict__.get(ATTRIBUTE)


def take(layer: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """The output the group's first member computed for `layer` with this very input, if any."""
    if not _STASH:
        return None
    held = _STASH.get(id(layer))
    if held is None or held[0] is not x:
        return None
    del _STASH[id(layer)]
    return held[1]


def record(layer: nn.Module, x: torch.Tensor) -> None:
    if _RECORD is not None:
        _RECORD.append((layer, x))


def joined(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """`torch.cat(tensors)` as a view, where they lie side by side in one storage (contiguous, one
    type and device, each right after the one before); else None."""
    first = tensors[0]
    at, size = first.data_ptr(), first.element_size()
    for t in tensors:
        if t.data_ptr() != at or not t.is_contiguous() or t.dtype != first.dtype or t.shape[1:] != first.shape[1:]:
            return None
        at += t.numel() * size
    rows = sum(t.shape[0] for t in tensors)
    return first.detach().as_strided((rows, *first.shape[1:]), first.stride(), first.storage_offset())


def run_group(leader: nn.Module, x: torch.Tensor, given: torch.Tensor,
              casts: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor | None:
    """`leader`'s output for `x` (its input `given`, cast to the step's type), computing its whole
    group's (the others' left for them under `given`, `take`), where
    the group can run as one (its weights side by side, every member's cast weights present,
    one type and device throughout); else None."""
    members = group_of(leader)
    if members is None:
        return None
    weights = [m.base_layer.weight for m in members]
    biases = [m.base_layer.bias for m in members]
    cast = [casts.get(id(m)) for m in members]
    if any(c is None for c in cast) or any(w.requires_grad or w.dtype != x.dtype or w.device != x.device for w in weights):
        return None
    downs, ups = [c[0] for c in cast], [c[1] for c in cast]
    if any(d.dtype != x.dtype for d in downs) or joined(weights) is None or joined(downs) is None:
        return None
    if any(b is None for b in biases):
        if any(b is not None for b in biases):
            return None
        biases = None
    elif any(b.requires_grad for b in biases) or joined(biases) is None:
        return None
    outputs = _LoraGroup.apply(x, len(members), weights, biases, *downs, *ups)
    for member, out in zip(members, outputs, strict=True):
        if member is not leader:
            _STASH[id(member)] = (given, out)
    return outputs[members.index(leader)]


class _LoraGroup(torch.autograd.Function):
    """LoRA Linears on one input as one node: `x Wcat^T (+ bcat)` and `x Dcat^T` once, then per
    member `base_i + low_i U_i^T` (one `addmm`). Backward: the members' gradients joined once, the
    input's gradient one `mm` and one `addmm` for all, the down weights' one `mm`, each up weight's
    one `mm`. Keeps what `_LoraLinear` keeps for one: the input, the down product, the weights."""

    @staticmethod
    def forward(ctx, x, n, weights, biases, *lora):
        ctx.set_materialize_grads(False)
        downs, ups = lora[:n], lora[n:]
        flat = x.reshape(-1, x.shape[-1])
        weight, down = joined(weights), joined(list(downs))
        base = flat @ weight.t() if biases is None else torch.addmm(joined(biases), flat, weight.t())
        low = flat @ down.t()
        widths, ranks = [u.shape[0] for u in ups], [u.shape[1] for u in ups]
        outputs = [torch.addmm(b, lo, u.t()).view(*x.shape[:-1], u.shape[0])
                   for b, lo, u in zip(base.split(widths, 1), low.split(ranks, 1), ups, strict=True)]
        ctx.save_for_backward(flat, low, weight, down, *ups)
        ctx.input_shape, ctx.n, ctx.widths, ctx.ranks = x.shape, n, widths, ranks
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        flat, low, weight, down, *ups = ctx.saved_tensors
        n = ctx.n
        grads = [torch.zeros(flat.shape[0], w, dtype=flat.dtype, device=flat.device) if g is None else g.reshape(-1, w)
                 for g, w in zip(grads, ctx.widths, strict=True)]  # an output nothing used
        grad_low = torch.cat([g @ u for g, u in zip(grads, ups, strict=True)], 1)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.addmm(torch.cat(grads, 1) @ weight, grad_low, down).view(ctx.input_shape)
        grad_downs = [None] * n
        if any(ctx.needs_input_grad[4:4 + n]):
            grad_downs = list((grad_low.t() @ flat).split(ctx.ranks, 0))
        grad_ups = [g.t() @ lo if ctx.needs_input_grad[4 + n + i] else None
                    for i, (g, lo) in enumerate(zip(grads, low.split(ctx.ranks, 1), strict=True))]
        return grad_x, None, None, None, *grad_downs, *grad_ups


def recording(layers: list[nn.Module]) -> bool:
    """Start recording the step's calls when a layer of `layers` has not been in a recorded step."""
    global _RECORD
    if any(ATTRIBUTE not in layer.__dict__ for layer in layers):
        _RECORD = []
        return True
    return False


def finish(layers: list[nn.Module], recorded: bool) -> None:
    """The step's end: its outputs dropped; after a recorded step, the groups it found set on
    their members (and their base weights fused), every other layer of `layers` marked as seen."""
    global _RECORD
    _STASH.clear()
    if not recorded:
        return
    calls, _RECORD = _RECORD or [], None
    position = {id(layer): i for i, layer in enumerate(layers)}
    for members in _runs(calls, position):
        if _fuse([m.base_layer.weight for m in members]) and _fuse([m.base_layer.bias for m in members]):
            for m in members:
                m.__dict__[ATTRIBUTE] = members
    for layer in layers:
        layer.__dict__.setdefault(ATTRIBUTE, None)


def _runs(calls: list[tuple[nn.Module, torch.Tensor]], position: dict[int, int]) -> list[tuple[nn.Module, ...]]:
    """Runs of calls in a row on one input object, of distinct layers of `position` whose places
    there are consecutive: each as its layers in that order."""
    runs, run = [], []
    for layer, x in [*calls, (None, None)]:
        if run and layer is not None and x is run[0][1] and id(layer) in position and all(layer is not r[0] for r in run):
            run.append((layer, x))
            continue
        places = sorted(position[id(r[0])] for r in run) if run and all(id(r[0]) in position for r in run) else []
        if len(places) > 1 and places[-1] - places[0] == len(places) - 1:
            runs.append(tuple(sorted((r[0] for r in run), key=lambda m: position[id(m)])))
        run = [(layer, x)] if layer is not None else []
    return runs


def _fuse(tensors: list[torch.Tensor | None]) -> bool:
    """Frozen tensors of one type and device moved into one, each left a view of its rows. True
    when done (or all None, or already so)."""
    if all(t is None for t in tensors):
        return True
    if any(t is None or t.requires_grad or t.dtype != tensors[0].dtype or t.device != tensors[0].device
           or t.shape[1:] != tensors[0].shape[1:] for t in tensors):
        return False
    if joined(tensors) is not None:
        return True
    with torch.no_grad():
        whole = torch.cat([t.detach() for t in tensors])
        rows = 0
        for t in tensors:
            t.data = whole[rows:rows + t.shape[0]]
            rows += t.shape[0]
    return True
