"""Run history read from run folders written here by hand (no training)."""

import json
from pathlib import Path

import pytest

from ot_gradio.runner import history
from ot_gradio.runner.rundir import RunDir, runs_root


def write_run(workspace: Path, name: str, config: dict, events: list[dict], samples: dict[str, bytes] | None = None) -> RunDir:
    """A finished run folder: config.json, events.jsonl, log.txt and sample files."""
    run = RunDir(runs_root(workspace) / name).make()
    run.config.write_text(json.dumps(config))
    run.events.write_text("".join(json.dumps(e) + "\n" for e in events))
    run.log.write_text("line 1\nlast line\n")
    for file, data in (samples or {}).items():
        (run.samples / file).write_bytes(data)
    return run


def metrics(t0: float, steps: list[tuple[int, float, float]]) -> list[dict]:
    return [{"type": "metrics", "time": t0 + s, "global_step": s, "loss": loss, "smooth_loss": smooth, "lr": 1e-4 * s}
            for s, loss, smooth in steps]


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    base = {"model_type": "STABLE_DIFFUSION_15", "optimizer": {"optimizer": "ADAMW", "learning_rate": 1e-4},
            "concepts": [{"path": "cats", "repeats": 1}], "batch_size": 1}
    other = {**base, "optimizer": {"optimizer": "ADAMW", "learning_rate": 3e-4}, "concepts": [{"path": "dogs", "repeats": 1}]}
    outside = tmp_path / "models" / "out.safetensors"
    outside.parent.mkdir()
    outside.write_bytes(b"model")
    # folder names sort the other way round from their start times: the order must come from the events
    write_run(ws, "b-older", base, [
        {"type": "status", "time": 1000.0, "status": "training", "message": ""},
        *metrics(1000.0, [(1, 0.5, 0.5), (2, 0.3, 0.48)]),
        {"type": "validation", "time": 1003.0, "global_step": 2, "loss": 0.4, "epoch": 0, "images": 2},
        {"type": "sample", "time": 1004.0, "path": "S1", "prompt": "a cat", "step": 2, "epoch": 0, "index": 0},
        {"type": "saved", "time": 1005.0, "path": str(outside), "kind": "model"},
        {"type": "saved", "time": 1005.0, "path": str(outside) + ".emb", "kind": "embedding"},
        {"type": "status", "time": 1070.0, "status": "done", "message": ""},
    ])
    write_run(ws, "a-newer", other, [
        {"type": "status", "time": 2000.0, "status": "training", "message": ""},
        *metrics(2000.0, [(1, 0.6, 0.6), (2, 0.2, 0.56), (3, 0.1, 0.51)]),
        {"type": "sample", "time": 2004.0, "path": "S2", "prompt": "a cat", "step": 2, "epoch": 0, "index": 0},
        {"type": "status", "time": 2010.0, "status": "stopped", "message": ""},
    ])
    return ws, outside


def test_list_runs_newest_first_with_their_summary(workspace):
    ws, outside = workspace
    rows = history.list_runs(ws)
    assert [r["name"] for r in rows] == ["a-newer", "b-older"]
    newer, older = rows
    assert (newer["status"], newer["steps"], newer["smoothed loss"], newer["duration"], newer["output file"]) == ("stopped", 3, 0.51, "0:10", "")
    assert (older["status"], older["steps"], older["smoothed loss"], older["duration"]) == ("done", 2, 0.48, "1:10")
    assert older["output file"] == str(outside)  # the model, not the embedding side file
    assert older["started"] and set(history.COLUMNS) <= set(older)


def test_a_run_that_ended_without_a_final_status_is_crashed(tmp_path):
    write_run(tmp_path, "r", {}, [{"type": "status", "time": 1.0, "status": "training", "message": ""}])
    assert history.list_runs(tmp_path)[0]["status"] == "crashed"
    assert history.list_runs(tmp_path / "nothing-here") == []


def test_series_and_config(workspace):
    ws, _ = workspace
    run = runs_root(ws) / "b-older"
    s = history.run_series(run)
    assert s["step"] == [1, 2] and s["loss"] == [0.5, 0.3] and s["smooth_loss"] == [0.5, 0.48]
    assert s["lr"] == pytest.approx([1e-4, 2e-4])
    assert (s["validation_step"], s["validation_loss"]) == ([2], [0.4])
    assert history.run_config(run)["optimizer"]["learning_rate"] == 1e-4


def test_compare_overlays_loss_lists_differing_fields_and_pairs_samples(workspace):
    ws, _ = workspace
    runs = [runs_root(ws) / "b-older", runs_root(ws) / "a-newer"]
    out = history.compare(runs)
    assert (1.0, 0.5, "b-older") in out["loss"] and (3.0, 0.51, "a-newer") in out["loss"]
    assert (2.0, 0.4, "b-older (validation)") in out["loss"]
    assert len(out["loss"]) == 2 + 1 + 3
    assert out["differing"] == {"optimizer.learning_rate": [1e-4, 3e-4], "concepts.0.path": ["cats", "dogs"]}
    assert out["samples"] == [("a cat", 2, [("b-older", "S1"), ("a-newer", "S2")])]


def test_differing_fields_names_a_field_only_one_config_has():
    assert history.differing_fields([{"a": {"b": 1}, "c": 2}, {"a": {"b": 1}}]) == {"c": [2, "(not set)"]}


def test_a_concept_only_one_run_has_is_one_row_after_the_real_differences():
    """Compare listed ~37 "concepts.1.* (not set)" rows before the real differences."""
    concept = {"name": "dog", "path": "dogs", "balancing": 1.0, "image": {"enable_crop_jitter": True, "flip": False}}
    one = {"epochs": 10, "concepts": [{"name": "cat", "path": "cats"}, concept]}
    two = {"epochs": 20, "concepts": [{"name": "cat", "path": "cats"}]}
    out = history.differing_fields([one, two])
    assert list(out) == ["epochs", "concepts.1"]
    assert out["concepts.1"] == ["'dog'", "(not set)"]


def test_delete_needs_the_run_name_and_keeps_an_output_outside_the_folder(workspace):
    ws, outside = workspace
    run = runs_root(ws) / "b-older"
    (run / "link-to-model").symlink_to(outside)  # a link inside the folder is removed, its target kept
    for wrong in ("", "yes", "a-newer", "b-older-x"):
        with pytest.raises(history.DeleteRefused, match="b-older"):
            history.delete_run(run, wrong)
        assert run.is_dir()
    history.delete_run(run, " b-older ")
    assert not run.exists()
    assert outside.read_bytes() == b"model"
    assert [r["name"] for r in history.list_runs(ws)] == ["a-newer"]


def test_delete_refuses_a_live_run(workspace):
    ws, _ = workspace
    run = RunDir(runs_root(ws) / "a-newer")
    from ot_gradio.runner.rundir import EventWriter

    writer = EventWriter(run)  # a worker holds the run's events
    try:
        with pytest.raises(history.DeleteRefused, match="still running"):
            history.delete_run(run, "a-newer")
    finally:
        writer.close()
    assert run.path.is_dir()
