"""bench/step_cpu_time.py runs: it times steps of the tiny UNet's LoRA forward and backward."""

from __future__ import annotations


def test_it_times_steps():
    from bench.step_cpu_time import step_times

    times = step_times(2)
    assert len(times) == 2 and all(t > 0 for t in times)
