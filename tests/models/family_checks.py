"""Checks that several family test files make on their loaded tiny family."""

from __future__ import annotations

import numpy as np
import torch


def assert_same_parts(family, again) -> None:
    """Every part of `again` (e.g. reloaded from a saved folder) has `family`'s tensors, key by key."""
    for part, module in family.parts.items():
        a, b = module.state_dict(), again.parts[part].state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), part


def assert_sample_uses_cfg_and_the_negative_prompt(family, prompt: str, plain_cfg: float) -> None:
    """`sample` of `prompt` at `plain_cfg` (no guidance), with CFG, and with a negative prompt
    gives three different images of the asked size, and leaves the transformer in training mode."""
    family.transformer.train()
    plain = family.sample(prompt, "", height=40, width=56, steps=2, cfg_scale=plain_cfg)
    assert plain.size == (56, 40) and family.transformer.training
    cfg = family.sample(prompt, "", height=40, width=56, steps=2, cfg_scale=4.0)
    negative = family.sample(prompt, "blue", height=40, width=56, steps=2, cfg_scale=4.0)
    assert np.abs(np.asarray(plain, float) - np.asarray(cfg, float)).max() > 0
    assert np.abs(np.asarray(cfg, float) - np.asarray(negative, float)).max() > 0
    family.transformer.eval()
