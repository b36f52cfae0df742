"""bench/step_operators.py: what SD 1.5's LoRA step launches on a GPU, counted on the CPU with the
GPU's data types and SD 1.5's every layer (32-64 channels wide). A small-batch GPU step waits on
launching its kernels, so the count is its cost there: it must not grow back. Before the LoRA
Linear became one autograd node and frozen 16-bit norms stopped casting (norm_casts.py) the count
was 4,592 operators, 914 of them casts; then 3,459 and 9; with diffusers' divisions by 1.0 skipped
(unit_scales.py) 3,352, none of them a `div` of a ResNet or attention output."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def test_sd15_lora_step_launches_at_most_what_it_did(tmp_path):
    from bench.step_operators import count_steps

    result = count_steps("sd15-lora-b1", tmp_path, 64, steps=1, warmup=0, narrow=True)
    counts = result["by_name"]
    # the whole UNet and text encoder ran forward and backward
    assert counts["native_group_norm"] == 61 and counts["native_layer_norm_backward"] > 60
    assert counts["_fused_adamw_"] >= 1
    assert result["operators"] <= 3400 and result["casts"] <= 20, (result["operators"], result["casts"])
    assert counts.get("div", 0) <= 8, counts.get("div")  # 112 before unit_scales (54 forward, 54 backward)
