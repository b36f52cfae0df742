"""Balancing as OneTrainer's (MGDS VariationSorting / DiskCache): floor(n * b) samples per epoch
with REPEATS, int(b) with SAMPLES, the images taken in turn through a fixed order, continuing
across epochs."""

from collections import Counter
from pathlib import Path

import pytest

from ot_gradio.data import build_dataset, dataset_summary
from ot_gradio.data.balancing import epoch_count, epoch_indices, epoch_showings, max_repeats
from ot_gradio.data.errors import DataError


def _folder(root: Path, write_image, name: str, count: int) -> Path:
    folder = root / name
    for i in range(count):
        write_image(folder / f"{name}{i:02d}.png", 32, 32)
    return folder


def _per_image(dataset, epochs: int) -> Counter:
    seen: Counter = Counter()
    for epoch in range(epochs):
        seen.update(s.item for batch in dataset.plan(epoch).batches for s in batch)
    return seen


def test_repeats_whole():
    assert epoch_indices(3, 2.0, "REPEATS", 0) == [0, 1, 2, 0, 1, 2]
    assert epoch_indices(3, 1.0, "REPEATS", 5) == [0, 1, 2]


@pytest.mark.parametrize(("count", "balancing", "strategy", "expected"), [
    (7, 1.5, "REPEATS", 10),    # floor(10.5); rounding gave 11
    (3, 0.5, "REPEATS", 1),     # floor(1.5); rounding gave 2
    (1, 0.5, "REPEATS", 0),     # never trained, as in OneTrainer; rounding gave 1
    (100, 0.29, "REPEATS", 28),  # 100 * 0.29 == 28.999999999999996 in floats: OneTrainer's floor gives 28
    (10, 0.3, "REPEATS", 3),
    (10, 5, "SAMPLES", 5),
    (4, 2.9, "SAMPLES", 2),
    (4, 0.5, "SAMPLES", 0),
])
def test_samples_per_epoch_are_onetrainers(count, balancing, strategy, expected):
    assert epoch_count(count, balancing, strategy) == expected
    assert all(len(epoch_indices(count, balancing, strategy, e)) == expected for e in range(4))


@pytest.mark.parametrize(("count", "balancing", "expected"), [(7, 1.5, 10), (3, 0.5, 1), (100, 0.29, 28)])
def test_a_dataset_epoch_has_onetrainers_count(tmp_path, write_image, make_concept, count, balancing, expected):
    folder = _folder(tmp_path, write_image, "c", count)
    dataset = build_dataset([make_concept(folder, balancing=balancing)], "64", 1)
    assert [dataset.plan(e).sample_count for e in range(3)] == [expected] * 3
    assert dataset.steps_per_epoch == expected and dataset.total_steps(3) == 3 * expected
    assert dataset.summary()["samples_per_epoch"] == expected


def test_samples_5_of_10_cover_every_image_twice_in_4_epochs(tmp_path, write_image, make_concept):
    folder = _folder(tmp_path, write_image, "c", 10)
    dataset = build_dataset([make_concept(folder, balancing=5, balancing_strategy="SAMPLES")], "64", 1, seed=11)
    epochs = [sorted(s.item for batch in dataset.plan(e).batches for s in batch) for e in range(4)]
    assert all(len(e) == len(set(e)) == 5 for e in epochs)
    assert set(epochs[0]).isdisjoint(epochs[1]) and set(epochs[2]).isdisjoint(epochs[3])  # two rounds through the 10
    assert _per_image(dataset, 4) == dict.fromkeys(range(10), 2)


def test_repeats_fraction_covers_every_image_evenly_across_epochs(tmp_path, write_image, make_concept):
    folder = _folder(tmp_path, write_image, "c", 7)
    dataset = build_dataset([make_concept(folder, balancing=1.5)], "64", 1, seed=5)
    for epochs in range(1, 12):
        seen = _per_image(dataset, epochs)
        assert sum(seen.values()) == 10 * epochs
        assert max(seen.values()) - min(seen.values()) <= 1, (epochs, seen)
    assert _per_image(dataset, 7) == dict.fromkeys(range(7), 10)  # 7 epochs of 10: each exactly 10 times
    per_epoch = Counter(s.item for batch in dataset.plan(0).batches for s in batch)
    assert sorted(per_epoch.values()) == [1, 1, 1, 1, 2, 2, 2]  # all once, the next 3 in the order twice


def test_half_of_each_concept_per_epoch_alternates(tmp_path, write_image, make_concept):
    folder = _folder(tmp_path, write_image, "c", 3)
    dataset = build_dataset([make_concept(folder, balancing=0.5)], "64", 1)
    assert _per_image(dataset, 3) == dict.fromkeys(range(3), 1)  # one image an epoch, each in turn


def test_the_walk_takes_each_rounds_order_and_continues():
    def order(round_):
        return [2, 0, 3, 1]

    assert [epoch_indices(4, 0.5, "REPEATS", e, order) for e in range(3)] == [[0, 2], [1, 3], [0, 2]]
    assert [epoch_indices(4, 3, "SAMPLES", e, order) for e in range(4)] == [[0, 2, 3], [0, 1, 2], [1, 2, 3], [0, 1, 3]]
    assert epoch_indices(4, 1.75, "REPEATS", 1, order) == [0, 1, 2, 3, 0, 1, 2]  # all once, then order[3], order[0], order[1]
    rounds = {0: [2, 0, 3, 1], 1: [1, 3, 0, 2]}  # each round its own order: round 1 begins at epoch 2
    assert [epoch_indices(4, 0.5, "REPEATS", e, rounds.__getitem__) for e in range(4)] == [[0, 2], [1, 3], [1, 3], [0, 2]]
    with pytest.raises(ValueError):
        epoch_indices(3, 1.5, "REPEATS", 0, lambda round_: [0, 0, 1])


@pytest.mark.parametrize(("count", "balancing", "strategy"), [
    (4, 1.0, "REPEATS"), (4, 2.0, "REPEATS"), (4, 1.75, "REPEATS"), (5, 0.4, "REPEATS"), (4, 3, "SAMPLES"), (3, 7, "SAMPLES"),
])
def test_each_showing_of_an_image_counts_its_earlier_ones(count, balancing, strategy):
    """An image's showings over the run are numbered 0, 1, 2, ... with no gap or repeat (the cached
    variation each one takes, planning.variation), whatever the balancing; with REPEATS 1 the number
    is the epoch, as before."""
    rounds = {r: sorted(range(count), key=lambda i, r=r: (i * 7 + r * 3) % count) for r in range(40)}
    numbers: dict[int, list[int]] = {i: [] for i in range(count)}
    for epoch in range(9):
        showings = epoch_showings(count, balancing, strategy, epoch, rounds.__getitem__)
        assert [i for i, _ in showings] == epoch_indices(count, balancing, strategy, epoch, rounds.__getitem__)
        for index, showing in showings:
            numbers[index].append(showing)
        if balancing == 1.0:
            assert [n for _, n in showings] == [epoch] * count
    assert all(shown == list(range(len(shown))) for shown in numbers.values()), numbers
    assert epoch_showings(3, 2.0, "REPEATS", 1) == [(0, 2), (1, 2), (2, 2), (0, 3), (1, 3), (2, 3)]


def test_images_alone_in_their_bucket_in_every_epoch_of_a_fixed_order_train_in_some_round(tmp_path, write_image, make_concept):
    """2 wide and 4 square images, REPEATS 0.5, batch 2: each epoch 3 of them. With one order for
    every round, the epochs alternate between the same two halves, and two wide images in different
    halves were each alone in their bucket, dropped every time and never trained. Each round's own
    order brings them together in some epochs."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in "ab":
        write_image(folder / f"{name}.png", 96, 64)
    for name in "cdef":
        write_image(folder / f"{name}.png", 64, 64)
    for seed in range(1, 6):
        dataset = build_dataset([make_concept(folder, balancing=0.5, seed=seed)], "64", 2)
        trained = Counter(s.item for e in range(40) for batch in dataset.plan(e).batches for s in batch)
        assert len(trained) == 6, (seed, trained)


def test_max_repeats_is_the_most_one_image_gets():
    for count, balancing, strategy in [(7, 1.5, "REPEATS"), (3, 0.5, "REPEATS"), (4, 10, "SAMPLES"), (1, 0.5, "REPEATS"), (5, 2, "REPEATS")]:
        most = max(max(Counter(epoch_indices(count, balancing, strategy, e)).values(), default=0) for e in range(count))
        assert max_repeats(count, balancing, strategy) == most


def test_a_concept_with_no_sample_per_epoch_is_warned_about(tmp_path, write_image, make_concept):
    lone = _folder(tmp_path, write_image, "lone", 1)
    other = _folder(tmp_path, write_image, "other", 4)
    concepts = [make_concept(lone, name="lone", balancing=0.5), make_concept(other, name="other")]
    dataset = build_dataset(concepts, "64", 1)
    notes = [w for w in dataset.warnings if "never trained" in w]
    assert len(notes) == 1 and "Concept 'lone'" in notes[0] and "Balancing 0.5" in notes[0] and "REPEATS" in notes[0]
    assert "at least 1" in notes[0]
    assert notes[0] in dataset.summary()["warnings"]
    assert notes[0] in dataset_summary(concepts, "64", 1)["warnings"]  # the page's Concepts statistics
    assert dataset.summary()["concepts"][0]["never_trained"] == []  # said by the warning, not as a bucket problem
    assert _per_image(dataset, 4) and all(dataset.plan(e).sample_count == 4 for e in range(4))

    samples = build_dataset([make_concept(lone, name="lone", balancing=0.9, balancing_strategy="SAMPLES"), make_concept(other)], "64", 1)
    assert any("Concept 'lone'" in w and "SAMPLES" in w and "never trained" in w for w in samples.warnings)
    assert not [w for w in build_dataset([make_concept(other, balancing=0.25)], "64", 1).warnings if "never trained" in w]
    held_out = build_dataset([make_concept(lone, name="lone", balancing=0.5), make_concept(other)], "64", 1, held_out=True)
    assert any("Concept 'lone'" in w and "never validated (its loss is never computed)" in w for w in held_out.warnings)


def test_only_concepts_with_no_sample_is_an_error_that_says_why(tmp_path, write_image, make_concept):
    lone = _folder(tmp_path, write_image, "lone", 1)
    with pytest.raises(DataError, match=r"no concept gives a sample per epoch(.|\n)*Concept 'lone'"):
        build_dataset([make_concept(lone, name="lone", balancing=0.5)], "64", 1)


def test_plans_are_reproducible_and_resumable(tmp_path, write_image, make_concept):
    a = _folder(tmp_path, write_image, "a", 7)
    b = _folder(tmp_path, write_image, "b", 10)
    concepts = [make_concept(a, balancing=1.5, seed=1), make_concept(b, balancing=4, balancing_strategy="SAMPLES", seed=2)]

    def plans(dataset, epochs):
        return [[[(s.concept, s.item, s.caption, s.variant) for s in batch] for batch in dataset.plan(e).batches] for e in epochs]

    first = build_dataset(concepts, "64", 1, seed=9)
    in_sequence = plans(first, range(5))
    assert in_sequence == plans(build_dataset(concepts, "64", 1, seed=9), range(5))
    assert plans(build_dataset(concepts, "64", 1, seed=9), [3]) == [in_sequence[3]]  # a resume at epoch 3
    other_seed = plans(build_dataset(concepts, "64", 1, seed=10), range(5))
    assert other_seed != in_sequence
    assert len(first.plan(3).batches) == first.steps_in_epoch(3) == 14


def test_the_step_estimates_count_as_the_trainer(tmp_path, write_image):
    """The Training tab's steps per epoch and a kohya import's epochs count floor(n × b) per concept
    (they summed n × b over the concepts and rounded up once)."""
    from ot_gradio.config.kohya_dataset import steps_per_epoch as kohya_steps
    from ot_gradio.ui.training_tab import steps_per_epoch

    a, b = _folder(tmp_path, write_image, "a", 7), _folder(tmp_path, write_image, "b", 3)
    concepts = [{"path": str(a), "balancing": 1.5}, {"path": str(b), "balancing": 2.9, "balancing_strategy": "SAMPLES"}]
    assert steps_per_epoch({"model_type": "STABLE_DIFFUSION_15", "batch_size": 1, "concepts": concepts}) == 12  # 10 + 2
    assert kohya_steps(concepts, {"batch_size": 1}, None) == 12
    assert steps_per_epoch({"model_type": "STABLE_DIFFUSION_15", "batch_size": 1, "concepts": concepts[:1]}) == 10
