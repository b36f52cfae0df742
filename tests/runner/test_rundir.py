from ot_gradio.runner.rundir import EventWriter, RunDir, create_run, list_runs
from ot_gradio.runner.supervisor import RunState


def test_events_cursor_never_loses_or_garbles(tmp_path):
    run = RunDir(tmp_path / "r").make()
    w = EventWriter(run)
    w.status("loading")
    events, cursor = run.read_events(0)
    assert [e["status"] for e in events] == ["loading"]
    with open(run.events, "a") as fh:
        fh.write('{"type": "progress", "glob')  # a half-written line
    more, cursor2 = run.read_events(cursor)
    assert more == [] and cursor2 == cursor
    with open(run.events, "a") as fh:
        fh.write('al_step": 3}\n')
    more, _ = run.read_events(cursor)
    assert more == [{"type": "progress", "global_step": 3}]


def test_control_requests(tmp_path):
    run = RunDir(tmp_path / "r").make()
    run.request("sample")
    run.request("stop")
    assert run.take_requests() == {"sample", "stop"}
    assert run.take_requests() == {"stop"}  # stop is a state, the rest are consumed


def test_create_and_list_runs(tmp_path):
    a = create_run(tmp_path, {"seed": 1})
    assert a.config.exists() and a.samples.is_dir() and a.control.is_dir()
    assert [r.path for r in list_runs(tmp_path)] == [a.path]


def test_state_from_events():
    s = RunState("x")
    for e in [
        {"type": "status", "status": "training"},
        {"type": "metrics", "global_step": 1, "loss": 0.5, "lr": 1e-4},
        {"type": "sample", "path": "a.jpg", "prompt": "p", "step": 1},
        {"type": "saved", "path": "m.safetensors"},
        {"type": "status", "status": "done", "message": "ok"},
    ]:
        s.apply(e)
    assert s.status == "done" and s.losses == [(1, 0.5)] and s.saved == ["m.safetensors"] and s.finished
