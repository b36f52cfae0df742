import random
from collections import Counter

from ot_gradio.data.balancing import epoch_indices


def test_repeats_whole():
    assert epoch_indices(3, 2.0, "REPEATS", random.Random(0)) == [0, 1, 2, 0, 1, 2]
    assert epoch_indices(3, 1.0, "REPEATS", random.Random(0)) == [0, 1, 2]


def test_repeats_fractional_is_seeded_subset():
    a = epoch_indices(10, 1.5, "REPEATS", random.Random(1))
    assert len(a) == 15
    counts = Counter(a)
    assert all(counts[i] in (1, 2) for i in range(10)) and sum(c == 2 for c in counts.values()) == 5
    assert a == epoch_indices(10, 1.5, "REPEATS", random.Random(1))
    assert a != epoch_indices(10, 1.5, "REPEATS", random.Random(2))
    assert len(epoch_indices(10, 0.3, "REPEATS", random.Random(0))) == 3


def test_samples_exact_count_and_even():
    out = epoch_indices(4, 10, "SAMPLES", random.Random(0))
    assert len(out) == 10
    assert sorted(Counter(out).values()) == [2, 2, 3, 3]
    assert len(epoch_indices(4, 2.9, "SAMPLES", random.Random(0))) == 2
    assert len(set(epoch_indices(4, 3, "SAMPLES", random.Random(0)))) == 3
    assert epoch_indices(0, 3, "SAMPLES", random.Random(0)) == []
