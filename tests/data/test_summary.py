import json
import subprocess
import sys
from pathlib import Path

from ot_gradio.data import build_dataset, dataset_summary


def _folder(root: Path, write_image, name: str, sizes) -> Path:
    folder = root / name
    for i, (w, h) in enumerate(sizes):
        write_image(folder / f"{name}{i}.png", w, h)
    return folder


def test_buckets_and_images_that_never_fill_a_batch(tmp_path, write_image, make_concept):
    folder = _folder(tmp_path, write_image, "c", [(32, 32)] * 5 + [(128, 64), (64, 128)])
    summary = build_dataset([make_concept(folder)], "64", 2).summary()
    concept = summary["concepts"][0]
    assert concept["buckets"] == {"48x88": 1, "64x64": 5, "88x48": 1}  # WxH, tall to wide
    assert sorted(Path(x["path"]).name for x in concept["never_trained"]) == ["c5.png", "c6.png"]
    assert concept["never_trained"][0]["buckets"] in (["88x48"], ["48x88"])
    assert summary["never_trained"] == 2 and summary["batch_size"] == 2
    assert summary["dropped_by_bucket"] == {"48x88": 1, "64x64": 1, "88x48": 1}

    repeated = build_dataset([make_concept(folder, balancing=2)], "64", 2).summary()
    assert repeated["never_trained"] == 0  # two samples of the wide image fill a batch of two
    assert build_dataset([make_concept(folder)], "64", 1).summary(batch_size=6)["never_trained"] == 7
    assert build_dataset([make_concept(folder, balancing=1.5)], "64", 2).summary()["never_trained"] == 0  # can appear twice


def test_a_bucket_shared_across_concepts_can_fill(tmp_path, write_image, make_concept):
    a = _folder(tmp_path, write_image, "a", [(32, 32), (32, 32), (128, 64)])
    b = _folder(tmp_path, write_image, "b", [(32, 32), (32, 32), (128, 64)])
    summary = build_dataset([make_concept(a), make_concept(b)], "64", 2).summary()
    assert [c["never_trained"] for c in summary["concepts"]] == [[], []]
    alone = build_dataset([make_concept(a)], "64", 2).summary()
    assert [Path(x["path"]).name for x in alone["concepts"][0]["never_trained"]] == ["a2.png"]


def test_resolution_override_with_a_list(tmp_path, write_image, make_concept):
    a = _folder(tmp_path, write_image, "a", [(32, 32)] * 2 + [(128, 64)])
    b = _folder(tmp_path, write_image, "b", [(32, 32)] * 2)
    override = make_concept(a, image={"enable_resolution_override": True, "resolution_override": "64, 128"})
    dataset = build_dataset([override, make_concept(b)], "64", 1)
    sizes: dict[str, set] = {"a": set(), "b": set()}
    for epoch in range(6):
        for batch in dataset.epoch_batches(epoch).plan.batches:
            for s in batch:
                sizes["ab"[s.concept]].add(s.variant.resolution)
    assert sizes == {"a": {(64, 64), (128, 128)}, "b": {(64, 64)}}
    summary = dataset.summary()
    assert summary["concepts"][0]["resolutions"] == [[64, 64], [128, 128]]
    assert summary["concepts"][0]["buckets"] == {"64x64": 2, "128x128": 2, "88x48": 1, "176x96": 1}
    assert summary["concepts"][1]["resolutions"] == [[64, 64]]


def test_dataset_summary_works_without_torch(tmp_path, write_image):
    folder = _folder(tmp_path, write_image, "c", [(32, 32)] * 3 + [(128, 64)])
    code = (
        "import json, sys\n"
        "from ot_gradio.config.concept import ConceptConfig\n"
        "from ot_gradio.data import dataset_summary\n"
        f"s = dataset_summary([ConceptConfig(path={str(folder)!r}, image_variations=2)], '64', 2)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(json.dumps(s))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["steps_per_epoch"] == 1 and summary["cache"] is None
    assert summary["concepts"][0]["buckets"] == {"64x64": 3, "88x48": 1}
    assert summary == dataset_summary([_concept(folder)], "64", 2)


def _concept(folder):
    from ot_gradio.config.concept import ConceptConfig

    return ConceptConfig(path=str(folder), image_variations=2)
