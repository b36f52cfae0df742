"""The dataset report on generated datasets: every broken file named, captions and masks found
and missing, sizes, buckets, images never trained; in the worker process and from the page."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pytest
from PIL import Image

from ot_gradio.cli import main as cli_main
from ot_gradio.runner.jobs import JobSupervisor
from ot_gradio.tools.jobs import Job, JobCancelled, JobError, run_inline
from ot_gradio.tools.report import build_report, to_markdown
from ot_gradio.ui.charts import bucket_order
from ot_gradio.ui.tools_tab import ToolsContext
from tests.tools.panel_wait import poll_to_end


def _image(path: Path, size, colour=(200, 30, 30)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)


@pytest.fixture
def dataset(tmp_path):
    """Square images (3, one captioned, one masked), one wide image alone in its bucket, and
    three broken files of different kinds."""
    d = tmp_path / "data" / "cat"
    for i in range(3):
        _image(d / f"sq{i}.png", (64, 64))
    _image(d / "wide.png", (128, 48))
    (d / "sq0.txt").write_text("a cat\nthe cat")
    Image.new("L", (64, 64), 255).save(d / "sq1-masklabel.png")
    (d / "empty.jpg").write_bytes(b"")
    (d / "text.png").write_text("not a png")
    good = d / "sq0.png"
    (d / "truncated.png").write_bytes(good.read_bytes()[:60])
    return d


def _config(*folders, **extra):
    return {"concepts": [{"path": str(f), "name": Path(f).name} for f in folders], "resolution": "64", "batch_size": 2, **extra}


def test_the_report_names_every_broken_file_and_what_is_missing(dataset):
    report = build_report(_config(dataset))
    (c,) = report["concepts"]
    assert c["images"] == 4
    assert sorted(u["name"] for u in c["unreadable"]) == ["empty.jpg", "text.png", "truncated.png"]
    assert all(u["reason"] for u in c["unreadable"])
    assert c["captions_found"] == 1 and sorted(c["captions_missing"]["names"]) == ["sq1.png", "sq2.png", "wide.png"]
    assert c["masks_found"] == 1 and c["masks_missing"]["count"] == 3 and "sq1.png" not in c["masks_missing"]["names"]
    assert c["size_range"] == {"min": [64, 48], "max": [128, 64]}
    assert c["transparent_images"]["count"] == 0 and "transparency" not in to_markdown(report)
    # the wide image is alone in its bucket: it can never fill a batch of 2
    assert [n["name"] for n in c["never_trained"]] == ["wide.png"]
    assert report["never_trained"] == 1
    assert sum(c["buckets"].values()) == 4 and c["buckets"]["64x64"] == 3
    text = to_markdown(report)
    for name in ("empty.jpg", "text.png", "truncated.png", "wide.png"):
        assert name in text
    assert "1 image(s) will never be trained" in report["message"]


def test_images_with_transparency_are_named_as_training_on_white(dataset):
    Image.new("RGBA", (64, 64), (0, 0, 0, 0)).save(dataset / "cut-out.png")
    report = build_report(_config(dataset))
    (c,) = report["concepts"]
    assert c["transparent_images"] == {"count": 1, "names": ["cut-out.png"]} and c["transparent"] == 1
    assert "- transparency: 1 image(s) have transparent pixels; they train on a white background: `cut-out.png`" in to_markdown(report)


def test_batch_size_and_resolution_change_what_is_lost(dataset):
    assert build_report(_config(dataset), batch_size=1)["never_trained"] == 0
    report = build_report(_config(dataset), resolution="64", batch_size=4)
    assert report["never_trained"] == 4  # no bucket holds 4 images
    assert report["steps_per_epoch"] == 0


def test_a_missing_concept_is_reported_and_the_others_still_are(dataset, tmp_path):
    report = build_report(_config(dataset, tmp_path / "gone", tmp_path))
    assert [c["name"] for c in report["concepts"]] == ["cat"]
    failed = {f["name"]: f["error"] for f in report["failed_concepts"]}
    assert "does not exist" in failed["gone"] and "no images" in failed[tmp_path.name]


def test_bad_settings_name_the_field(dataset):
    with pytest.raises(JobError, match="resolution"):
        build_report(_config(dataset), resolution="huge")
    with pytest.raises(JobError, match="concepts"):
        build_report({"concepts": []})


def test_cancel_stops_between_concepts(dataset):
    with pytest.raises(JobCancelled):
        run_inline("report", {"config": _config(dataset)}, Job(is_cancelled=lambda: True))


def test_the_report_runs_in_the_job_worker(dataset, tmp_path):
    sup = JobSupervisor(tmp_path / "ws")
    job = sup.start("report", {"config": _config(dataset)})
    assert sup.wait(job, 120) == 0
    state = sup.state(job)
    assert state.status == "done", state.message
    assert state.result["concepts"][0]["images"] == 4
    assert state.total == 1 and state.done == 1


def test_the_command_line_report(dataset, capsys):
    assert cli_main(["report", str(dataset), "--resolution", "64", "--batch-size", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["never_trained"] == 1
    assert cli_main(["report", str(dataset), str(dataset.parent / "gone")]) == 1
    assert "gone: cannot be used" in capsys.readouterr().out


def test_the_page_tool_refuses_then_runs_and_draws_the_chart(dataset, tmp_path):
    from ot_gradio.ui.tools_report import ReportTool

    with gr.Blocks():
        state = gr.State({})
        ctx = ToolsContext(tmp_path / "ws", JobSupervisor(tmp_path / "ws"), state, lambda config: [tmp_path / "ws", dataset.parent])
        tool = ReportTool(ctx)
    refused = tool.start({"concepts": []}, "", 0)
    assert refused[0] == "" and "no enabled concept" in refused[2]
    outside = tool.start(_config("/etc"), "", 0)
    assert outside[0] == "" and "concepts[0].path" in outside[2] and "outside" in outside[2]
    job_id, *_ = tool.start(_config(dataset), "64", 2)
    assert job_id
    out = poll_to_end(tool.panel, job_id)
    summary, update = out[-2:]
    chart = update["value"]
    assert update["sort"] == bucket_order(list(chart["bucket"]))  # the bars in aspect order, not as text
    assert "truncated.png" in summary and "wide.png" in summary
    assert set(chart["bucket"]) == set(build_report(_config(dataset))["concepts"][0]["buckets"]) and len(chart) == 2
    assert chart["images"].sum() == 4


def test_a_video_familys_report_counts_clips_and_names_broken_and_short_ones(tmp_path):
    from tests.video_clips import write_clip, write_hostile_clips

    d = tmp_path / "clips"
    write_clip(d / "long.mp4", frames=9)
    write_clip(d / "short.mp4", frames=3)
    _image(d / "still.png", (32, 32))
    hostile = write_hostile_clips(d)
    report = build_report(_config(d, model_type="WAN_2_1", frames="9"))
    (c,) = report["concepts"]
    assert (c["images"], c["clips"], c["clip_frames"]) == (3, 2, 9 + 1)
    assert sorted(u["name"] for u in c["unreadable"]) == sorted(p.name for p in hostile.values())
    assert any("short.mp4" in w and "trains with 1 of the 9 frames set" in w for w in c["warnings"])
    assert "clips: **2**" in to_markdown(report)


def test_a_depth_models_report_counts_depth_maps_and_no_depth_map_as_an_image(dataset):
    _image(dataset / "sq2-depth.png", (64, 64), (255, 255, 255))
    report = build_report(_config(dataset, model_type="STABLE_DIFFUSION_20_DEPTH"))
    (c,) = report["concepts"]
    assert (c["images"], c["depth_maps_found"]) == (4, 1)
    assert "depth maps: 1 beside their images, 3 estimated" in to_markdown(report)
    (other,) = build_report(_config(dataset))["concepts"]
    assert other["images"] == 5 and "depth_maps_found" not in other  # another model type: an image
