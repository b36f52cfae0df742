"""The Runs tab's handlers on run folders written here, and the page built with the tab."""

import json

import gradio as gr
import pytest
from PIL import Image

from ot_gradio.runner.rundir import RunDir, runs_root
from ot_gradio.ui.runs_tab import RunsTab, build_runs_tab


def write_run(ws, name, config, t0, losses, sample_color):
    run = RunDir(runs_root(ws) / name).make()
    run.config.write_text(json.dumps(config))
    sample = run.samples / "s.png"
    Image.new("RGB", (8, 8), sample_color).save(sample)
    events = [{"type": "status", "time": t0, "status": "training", "message": ""}]
    events += [{"type": "metrics", "time": t0 + i, "global_step": i, "loss": v, "smooth_loss": v, "lr": 0.001} for i, v in enumerate(losses, 1)]
    events += [{"type": "sample", "time": t0 + 9, "path": str(sample), "prompt": "a dog", "step": len(losses)},
               {"type": "saved", "time": t0 + 9, "path": config["output_model_destination"], "kind": "model"},
               {"type": "status", "time": t0 + 10, "status": "done", "message": ""}]
    run.events.write_text("".join(json.dumps(e) + "\n" for e in events))
    run.log.write_text("starting\nfinished\n")
    return run


@pytest.fixture
def runs(tmp_path):
    ws = tmp_path / "ws"
    inside = ws / "models" / "one.safetensors"
    inside.parent.mkdir(parents=True)
    inside.write_bytes(b"1")
    elsewhere = tmp_path / "elsewhere.safetensors"
    elsewhere.write_bytes(b"2")
    write_run(ws, "run-one", {"output_model_destination": str(inside), "learning_rate": 0.001}, 100.0, [0.5, 0.4], "red")
    write_run(ws, "run-two", {"output_model_destination": str(elsewhere), "learning_rate": 0.002}, 200.0, [0.6, 0.3, 0.2], "blue")
    loaded = []
    with gr.Blocks():
        state = gr.State({})
        tab = build_runs_tab(lambda: ws, lambda path: loaded.append(path) or {state: json.loads(open(path).read())}, [state])
    return tab, ws, loaded, state, elsewhere


def test_refresh_lists_runs_newest_first(runs):
    tab, ws, *_ = runs
    table, choices = tab.refresh(["run-one", "gone"])
    assert [row[0] for row in table] == ["run-two", "run-one"]
    assert table[0][1:2] == ["done"] and table[0][4] == 3
    assert choices["choices"] == ["run-two", "run-one"] and choices["value"] == ["run-one"]
    assert tab.selected.choices == [("run-two", "run-two"), ("run-one", "run-one")]  # listed as the page is built


def test_open_gives_float_charts_log_config_samples_and_a_confined_output(runs):
    tab, ws, _, _, elsewhere = runs
    losses, lrs, log, config, note, samples, details, button = tab.open(["run-one", "run-two"])
    assert losses["x_lim"] == lrs["x_lim"] == [0, 50]  # a 2-step run: whole-step ticks (charts.step_chart)
    losses, lrs = losses["value"], lrs["value"]
    assert details["open"] is True  # the log, config and output are shown
    assert [caption for _, caption in samples] == ["run-one · step 2 · a dog"]
    assert Image.open(samples[0][0]).getpixel((0, 0)) == (255, 0, 0)  # run-one's own sample
    assert str(losses["step"].dtype) == "float64" and str(losses["value"].dtype) == "float64"
    assert sorted(set(losses["series"])) == ["loss", "smoothed"] and len(losses) == 4
    assert list(lrs["lr"]) == [0.001, 0.001]
    assert log.endswith("finished") and json.loads(config)["learning_rate"] == 0.001
    assert str((ws / "models" / "one.safetensors").resolve()) in note
    assert button["visible"] and open(button["value"], "rb").read() == b"1"
    # run-two's output is its configured output path (outside the workspace): offered too
    assert open(tab.open(["run-two"])[7]["value"], "rb").read() == b"2"
    # an events line naming any other file (model or sample) is never offered
    run = RunDir(runs_root(ws) / "run-two")
    secret = ws.parent / "secret.png"
    Image.new("RGB", (8, 8), "green").save(secret)
    with open(run.events, "a") as fh:
        fh.write(json.dumps({"type": "saved", "time": 300.0, "path": str(secret), "kind": "model"}) + "\n")
        fh.write(json.dumps({"type": "sample", "time": 300.0, "path": str(secret), "prompt": "x", "step": 9}) + "\n")
    _, _, _, _, note, samples, _, button = tab.open(["run-two"])
    assert "No output file" in note and [c for _, c in samples] == ["run-two · step 3 · a dog"]
    assert button == {"__type__": "update", "value": None, "visible": False}


def test_a_click_on_a_row_opens_that_run_first_in_the_selection(runs):
    tab, *_ = runs
    row = tab.rows()[0][1]  # run-one's row
    click = gr.SelectData(tab.table, {"index": [1, 3], "value": "0:02", "row_value": row})
    chosen, losses, *_, details, _ = tab.on_row(["run-two"], click)
    assert chosen["value"] == ["run-one", "run-two"] and details["open"] is True  # opened; Compare keeps run-two
    assert [s for s in losses["value"]["series"].unique()] == ["loss", "smoothed"]
    gone = gr.SelectData(tab.table, {"index": [0, 0], "value": "deleted-run", "row_value": ["deleted-run"]})
    assert all(isinstance(o, dict) and o.get("__type__") == "update" and len(o) == 1 for o in tab.on_row([], gone))  # skipped


def test_compare_overlays_lists_differences_and_shows_samples_side_by_side(runs):
    tab, *_ = runs
    frame, differing, gallery = tab.compare(["run-one", "run-two"])
    frame = frame["value"]
    assert str(frame["step"].dtype) == "float64" and str(frame["loss"].dtype) == "float64"
    assert sorted(set(frame["run"])) == ["run-one", "run-two"] and len(frame) == 5
    fields = dict(differing)
    assert set(fields) == {"learning_rate", "output_model_destination"}
    assert fields["learning_rate"] == "run-one: 0.001 | run-two: 0.002"
    assert [caption for _, caption in gallery] == ["run-one · step 2 · a dog", "run-two · step 3 · a dog"]
    with pytest.raises(gr.Error, match="2 to 4"):
        tab.compare(["run-one"])


def test_names_not_in_the_workspace_are_refused(runs):
    tab, *_ = runs
    for name in ("../ws/runs/run-one", "nope"):
        with pytest.raises(gr.Error, match="no run named"):
            tab.open([name])
    with pytest.raises(gr.Error, match="select a run"):
        tab.open([])


def test_load_this_config_passes_the_runs_config_file(runs):
    tab, ws, loaded, state, _ = runs
    out = tab.load_config(["run-two"])
    assert loaded == [str(runs_root(ws) / "run-two" / "config.json")]
    assert out[state]["learning_rate"] == 0.002


def test_delete_needs_the_name_typed(runs):
    tab, ws, _, _, elsewhere = runs
    with pytest.raises(gr.Error, match="type the run's name 'run-two'"):
        tab.delete(["run-two"], "run-one")
    assert (runs_root(ws) / "run-two").is_dir()
    message, table, choices, confirm = tab.delete(["run-two", "run-one"], "run-two")
    assert "Deleted" in message and confirm == ""
    assert [row[0] for row in table] == ["run-one"] and choices["value"] == ["run-one"]
    assert not (runs_root(ws) / "run-two").exists() and elsewhere.exists()


def test_the_page_has_the_runs_tab_and_loads_a_runs_config_into_the_form(page):
    assert isinstance(page.runs_tab, RunsTab)
    tab = next(b for b in page.blocks.blocks.values() if getattr(b, "elem_id", None) == "tab-runs")
    assert isinstance(tab, gr.Tab) and page.runs_tab.tab is tab
    on_select = [fn for fn in page.blocks.fns.values() if (tab._id, "select") in fn.targets]
    assert [fn.fn.__func__ for fn in on_select] == [RunsTab.refresh]  # opening the tab re-reads the runs
    config = page.on_page_load()[page.config_state]
    config["learning_rate"] = 0.000123
    # runs are where Start puts them: the config's workspace folder
    assert str(page.runs_tab.workspace()) == str(config.get("workspace_dir") or page.workspace)
    run = RunDir(runs_root(page.runs_tab.workspace()) / "20260101-000000-run-abc").make()
    run.config.write_text(json.dumps(config))
    table, choices = page.runs_tab.refresh()
    assert choices["choices"] == [run.run_id]
    out = page.runs_tab.load_config([run.run_id])
    assert out[page.config_state]["learning_rate"] == 0.000123
    assert float(out[page.fields["learning_rate"].component]) == 0.000123  # the form shows it
    assert set(out) <= set(page.runs_tab.load_outputs)
    assert page.on_page_load()[page.config_state]["learning_rate"] == 0.000123  # autosaved like Load
