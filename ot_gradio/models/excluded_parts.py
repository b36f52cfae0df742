"""Text encoders left out of a run (OneTrainer's `<part>.include: false`; which parts may be: the
description's `includable`, config/families.includable_parts): the loader reads neither the part
nor its tokenizer (the pipeline is given None for both), the family holds None for it and lists
it in none of its parts, so nothing else loads, trains, moves, caches or counts it, and its
`encode_text` puts zeros of the part's output shape where its output would be (`zeros`).

The parts to leave out travel from `FlowFamily.load` to the loaders and the family's __init__
as a context, as HiDream's Llama source does, so each loader path only adds `left_out`."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import torch

_EXCLUDED: ContextVar[frozenset[str]] = ContextVar("excluded_parts", default=frozenset())


@contextlib.contextmanager
def excluding(parts: Collection[str]) -> Iterator[None]:
    """While loading: the text encoder parts to leave out."""
    token = _EXCLUDED.set(frozenset(parts))
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


def excluded_now() -> frozenset[str]:
    return _EXCLUDED.get()


def left_out(tokenizer_attrs: Mapping[str, str]) -> dict[str, None]:
    """The pipeline keywords that load neither an excluded part nor its tokenizer (diffusers takes None as 'skip')."""
    out: dict[str, None] = {}
    for part in excluded_now():
        if part in tokenizer_attrs:
            out[part] = out[tokenizer_attrs[part]] = None
    return out


def without_excluded(family: Any, excluded: Collection[str]) -> None:
    """The family instance's parts, text encoders and tokenizers without `excluded` (held as None),
    shadowing the class's lists from the description."""
    excluded = frozenset(excluded)
    family.excluded_parts = excluded
    if not excluded:
        return
    family.part_names = tuple(p for p in family.part_names if p not in excluded)
    family.text_encoder_names = tuple(p for p in family.text_encoder_names if p not in excluded)
    family.tokenizer_attrs = {p: t for p, t in family.tokenizer_attrs.items() if p not in excluded}


def left_out_of(family: Any) -> dict[str, None]:
    """A loaded family's excluded parts and their tokenizers as None, for a pipeline built around its parts."""
    attrs = type(family).tokenizer_attrs
    return {name: None for part in family.excluded_parts for name in (part, attrs[part])}


def caption_lists(captions: Sequence[str] | Mapping[str, Sequence[str]], parts: Sequence[str]) -> tuple[dict[str, list[str]], int]:
    """`encode_text`'s captions as one list per included part, and the batch size (also when no
    text encoder is left to read them)."""
    if isinstance(captions, Mapping):
        lists = {part: [str(t) for t in captions[part]] for part in parts}
        batch = len(next(iter(captions.values()))) if captions else 0
    else:
        lists = {part: [str(t) for t in captions] for part in parts}
        batch = len(captions)
    return lists, batch


def zeros(anchor: torch.nn.Module | None, *shape: int) -> torch.Tensor:
    """Zeros in place of a left-out encoder's output, float32 on `anchor`'s device (the parts
    cast conditioning to their own type where they read it)."""
    from ot_gradio.models.common import module_device

    device = module_device(anchor) if anchor is not None else torch.device("cpu")
    return torch.zeros(*shape, device=device, dtype=torch.float32)


def split_width(total: int, present: Mapping[str, int], parts: Sequence[str]) -> dict[str, int]:
    """The width of each of `parts` side by side in a vector of `total` (SD 3's and HiDream's
    CLIP-L | CLIP-G pooled outputs): the present parts' own, the rest shared by the missing ones
    (all of it to the first: zeros either way)."""
    missing = [p for p in parts if p not in present]
    rest = total - sum(present.values())
    return {p: present[p] if p in present else (rest if p == missing[0] else 0) for p in parts}
