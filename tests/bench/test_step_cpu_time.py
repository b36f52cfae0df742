"""bench/step_cpu_time.py runs: it times steps of the tiny UNet's LoRA forward and backward, in
float32 and as a FLOAT_16 run on a GPU computes them."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("half", [False, True])
def test_it_times_steps(half):
    from bench.step_cpu_time import step_times

    times = step_times(2, half)
    assert len(times) == 2 and all(t > 0 for t in times)
